package harness

import (
	"cmp"
	"context"
	"encoding/hex"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file reads a key's admissions from Redis during a run, and gives
// each call that went through a RoundTripper (which does not show its
// permit) the score it was admitted at.

// Admission is one call admitted in Redis: a member of the key's sorted
// set.
type Admission struct {
	// Prefix is the member's first 8 bytes, in hex: the Throttler (the
	// process) that added it.
	Prefix string
	// Score is the server time it was counted at, in Unix µs.
	Score int64
	// GivenBack: the member left the set while its score was less than an
	// interval old, which no trim does: the library gave it back (a call
	// woken too late, which reserved again).
	GivenBack bool
	gone      bool
}

// admissionWatch polls a key's sorted set until stopped, and keeps every
// member that is a call (its score a time within the run).
type admissionWatch struct {
	rdb      *redis.Client
	key      string
	interval time.Duration
	min      string // the least score read: meta members score below

	mu   sync.Mutex
	seen map[string]*Admission
	err  error

	stop chan struct{}
	done chan struct{}
}

// watchAdmissions polls key on rdb every every, from now until stop, for
// members scored from since on.
func watchAdmissions(rdb *redis.Client, key string, interval time.Duration, since time.Time, every time.Duration) *admissionWatch {
	w := &admissionWatch{rdb: rdb, key: key, interval: interval, min: strconv.FormatInt(since.UnixMicro(), 10),
		seen: map[string]*Admission{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			w.poll()
			select {
			case <-t.C:
			case <-w.stop:
				w.poll()
				return
			}
		}
	}()
	return w
}

// poll reads the set once.
func (w *admissionWatch) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	zs, err := w.rdb.ZRangeByScoreWithScores(ctx, w.key, &redis.ZRangeBy{Min: w.min, Max: "+inf"}).Result()
	now := time.Now().UnixMicro()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.err = err
		return
	}
	present := make(map[string]bool, len(zs))
	for _, z := range zs {
		m, _ := z.Member.(string)
		if len(m) <= 8 {
			continue // not a call's member
		}
		present[m] = true
		if w.seen[m] == nil {
			w.seen[m] = &Admission{Prefix: hex.EncodeToString([]byte(m[:8])), Score: int64(z.Score)}
		}
	}
	for m, a := range w.seen {
		if !present[m] && !a.gone {
			a.gone = true
			a.GivenBack = a.Score > now-w.interval.Microseconds()
		}
	}
}

// end stops the polls (after a last one) and returns the admissions seen,
// by score, and the last error a poll met.
func (w *admissionWatch) end() ([]Admission, error) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Admission, 0, len(w.seen))
	for _, a := range w.seen {
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b Admission) int { return cmp.Compare(a.Score, b.Score) })
	return out, w.err
}

// handoff is one admitted call of a replica: its name, when the
// library's wait for it returned and when its request's headers were
// written (Unix ns; 0: not written).
type handoff struct {
	call          string
	waited, wrote int64
}

// matchScores gives each admitted call the score of its admission. A
// call's score lies at most lag before its wait returned (the library
// hands a call on once its slot has come, and gives back a slot it woke
// too late for) and at most lead after its request was written (written
// on its slot, or on a new one it took at its connection, then at once);
// within that, it is near one of the two: the wait's return, or the
// write of a call that took a new slot. The write counts writePenalty
// farther: a call is near the score it waited for far more often, and
// two calls of a burst may each be written next to the other's score.
// Each process's calls (by replica) are paired with the admissions of
// one Throttler prefix, nearest first (see pairCalls), and each replica
// is given the prefix it pairs the most calls with. Admissions given back
// take no part. It returns the score of each call paired (Unix µs), and
// each replica's prefix.
func matchScores(calls map[int][]handoff, adm []Admission, lag, lead time.Duration) (map[string]int64, map[int]string) {
	byPrefix := map[string][]int64{}
	for _, a := range adm {
		if !a.GivenBack {
			byPrefix[a.Prefix] = append(byPrefix[a.Prefix], a.Score)
		}
	}
	type pairing struct {
		replica int
		prefix  string
		n       int
		to      []int
	}
	for _, scores := range byPrefix {
		slices.Sort(scores)
	}
	var all []pairing
	for r, hs := range calls {
		for p, scores := range byPrefix {
			to := pairCalls(hs, scores, lag, lead)
			n := 0
			for _, j := range to {
				if j >= 0 {
					n++
				}
			}
			all = append(all, pairing{replica: r, prefix: p, n: n, to: to})
		}
	}
	slices.SortFunc(all, func(a, b pairing) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.replica, b.replica), cmp.Compare(a.prefix, b.prefix))
	})
	scores, owner := map[string]int64{}, map[int]string{}
	taken := map[string]bool{}
	for _, pr := range all {
		if pr.n == 0 || taken[pr.prefix] || owner[pr.replica] != "" {
			continue
		}
		taken[pr.prefix], owner[pr.replica] = true, pr.prefix
		for i, j := range pr.to {
			if j >= 0 {
				scores[calls[pr.replica][i].call] = byPrefix[pr.prefix][j]
			}
		}
	}
	return scores, owner
}

// pairCalls pairs calls with scores (µs, ascending), as matchScores says:
// of every call and score that may go together, the nearest pairs first
// (a pair's distance is the score's from the wait's return, or from the
// write plus writePenalty, the nearer), each call and score once. It returns the index of
// each call's score, or -1.
func pairCalls(calls []handoff, scores []int64, lag, lead time.Duration) []int {
	type pair struct {
		i, j int
		cost int64
	}
	var pairs []pair
	for i, c := range calls {
		waited, wrote := c.waited/1000, c.wrote/1000
		lo, hi := waited-lag.Microseconds(), max(waited, wrote)+lead.Microseconds()
		j, _ := slices.BinarySearch(scores, lo)
		for ; j < len(scores) && scores[j] <= hi; j++ {
			cost := abs(scores[j] - waited)
			if wrote > 0 {
				cost = min(cost, abs(wrote-scores[j])+writePenalty.Microseconds())
			}
			pairs = append(pairs, pair{i: i, j: j, cost: cost})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		return cmp.Or(cmp.Compare(a.cost, b.cost), cmp.Compare(a.i, b.i), cmp.Compare(a.j, b.j))
	})
	to := make([]int, len(calls))
	for i := range to {
		to[i] = -1
	}
	used := make([]bool, len(scores))
	for _, p := range pairs {
		if to[p.i] < 0 && !used[p.j] {
			to[p.i], used[p.j] = p.j, true
		}
	}
	return to
}

// writePenalty is how much farther a score is counted from a call's
// write than from its wait's return (see matchScores).
const writePenalty = 10 * time.Millisecond

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
