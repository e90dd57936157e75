package throttler

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/go-throttler/throttler/internal/replica"
)

// TestFaultReplicasKilled: three replica processes keep the key saturated
// while replicas are SIGKILLed at random moments, some by themselves right
// after a reply rejected claims whose members are still in Redis, each
// replaced at once. The limit holds throughout; what the dead leave behind
// stops counting within the crash bound (interval + buffer + reserve-ahead)
// and is deleted a second later; and the survivors get the full capacity
// back within the crash bound after the last kill.
func TestFaultReplicasKilled(t *testing.T) {
	redistest.Long(t)
	const (
		limit      = 20
		interval   = 500 * time.Millisecond
		buffer     = 50 * time.Millisecond
		goroutines = 6
		wantKills  = 22
		wantMid    = 6 // of them, self-kills mid-reservation
	)
	ahead := min(interval, time.Second) // the default reserve-ahead
	bound := interval + buffer + ahead  // the documented crash bound
	w := interval + buffer
	srv := redistest.Start(t)
	f := newFleet(t, srv, replica.Config{Limit: limit, Interval: interval, Buffer: buffer, Goroutines: goroutines})
	client := srv.NewClient()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kill schedule seed %d", seed)
		}
	})

	var slots [3]*replicaProc
	for i := range slots {
		slots[i] = f.start(nil)
	}
	f.waitAdmitted(2*limit, 20*time.Second)

	midAlive := func(except int) bool {
		for i, p := range slots {
			if i != except && p.cfg.KillMid > 0 {
				return true
			}
		}
		return false
	}
	kills, mids := 0, 0
	var lastKill time.Time
	killed := map[string]time.Time{} // member prefix -> when its replica died
	replace := func(i int, at time.Time) {
		f.mu.Lock()
		killed[slots[i].prefix] = at
		f.mu.Unlock()
		kills++
		lastKill = at
		var mod func(*replica.Config)
		// At most one mid-reservation replica at a time, so that two
		// ordinary ones keep the key saturated.
		if mids < wantMid && !midAlive(i) {
			n := 1 + rng.IntN(3)
			mod = func(c *replica.Config) { c.KillMid = n }
		}
		slots[i] = f.start(mod)
	}
	// Hard bound on the kill phase: the random kills take about 6s; the
	// self-kills need a replica to see rejected claims a few times.
	phaseEnd := time.Now().Add(30 * time.Second)
	nextKill := time.Now().Add(time.Duration(100+rng.IntN(300)) * time.Millisecond)
	for kills < wantKills-1 || mids < wantMid {
		if time.Now().After(phaseEnd) {
			t.Fatalf("kill phase over time: %d kills, %d of them mid-reservation (want %d, %d)", kills, mids, wantKills, wantMid)
		}
		time.Sleep(5 * time.Millisecond)
		for i, p := range slots {
			select {
			case <-p.Done():
			default:
				continue
			}
			f.mu.Lock()
			mid, at := p.killMid, p.killMidAt
			f.mu.Unlock()
			if !mid {
				t.Fatalf("replica %s died on its own (exit code %d):\n%s", p.cfg.ID, p.ExitCode(), p.Stderr())
			}
			f.mu.Lock()
			p.killedAt = at
			f.mu.Unlock()
			mids++
			replace(i, at)
		}
		if kills < wantKills-1 && time.Now().After(nextKill) {
			// A random replica, but leave a mid-reservation one time to
			// kill itself (2s).
			var cand []int
			for i, p := range slots {
				if p.cfg.KillMid == 0 || time.Since(p.startedAt) > 2*time.Second {
					cand = append(cand, i)
				}
			}
			i := cand[rng.IntN(len(cand))]
			replace(i, f.kill(slots[i]))
			nextKill = time.Now().Add(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		} else if kills >= wantKills-1 {
			// Only self-kills missing: a mid-reservation replica that does
			// not get there in 3s is killed and replaced by another.
			for i, p := range slots {
				if p.cfg.KillMid > 0 && time.Since(p.startedAt) > 3*time.Second {
					replace(i, f.kill(p))
				}
			}
		}
	}
	// The last kill: a replica running for a second or more that holds the
	// most slots reserved ahead right now, so that the survivors' recovery
	// measures the crash bound.
	pick := -1
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		now := serverMicros(t, client)
		ahead := map[string]int{}
		for m, score := range calls(t, client, f.base.Key) {
			if score > now {
				ahead[m[:min(len(m), prefixLen)]]++
			}
		}
		pick = -1
		best := 0
		f.mu.Lock()
		for i, p := range slots {
			if time.Since(p.startedAt) >= time.Second && ahead[p.prefix] > best {
				pick, best = i, ahead[p.prefix]
			}
		}
		f.mu.Unlock()
		if pick >= 0 {
			break
		}
	}
	if pick < 0 {
		t.Fatal("no replica running for 1s held a slot ahead within 3s")
	}
	victim := slots[pick]
	replace(pick, f.kill(victim))
	k := lastKill.UnixMicro()
	f.mu.Lock()
	victimPrefix := victim.prefix
	f.mu.Unlock()
	held, furthest := 0, int64(0)
	for m, score := range calls(t, client, f.base.Key) {
		if strings.HasPrefix(m, victimPrefix) && score > k {
			held++
			furthest = max(furthest, score-k)
		}
	}
	// The live replicas keep the key busy (and trimmed) past the crash
	// bound of the last kill, plus the second before deletion, plus a trim.
	isDead := func(prefix string) (time.Time, bool) {
		f.mu.Lock()
		defer f.mu.Unlock()
		at, ok := killed[prefix]
		return at, ok
	}
	time.Sleep(time.Until(lastKill.Add(bound + 100*time.Millisecond)))
	// (b1) At the crash bound, nothing of a dead replica counts any more.
	now := serverMicros(t, client)
	behind := 0
	for m, score := range calls(t, client, f.base.Key) {
		at, dead := isDead(m[:min(len(m), prefixLen)])
		if !dead {
			continue
		}
		behind++
		if score > now-w.Microseconds() {
			t.Errorf("a member of a replica killed %s before still counts: score %s before now (crash bound %s)",
				time.Since(at).Round(time.Millisecond), fmtMicros(now-score), bound)
		}
	}
	// (b2) A second after they stop counting (and a trim), they are gone.
	// A trim rides on a round trip, which the survivors, with callers
	// waiting, make at least every core.QuietFloor (a short window), and it cuts at the server's
	// last clock reading, up to clockEvery old: a member can outlive its
	// second by that much, plus a round trip. (A 500ms slack failed about
	// one run in three, on the code before and after the core was split
	// into plan and resolve: members 2.07-2.17s old against 2.05s.) Only
	// calls are judged (see calls): a clean CI failed on the margin's
	// members, which a replica that widened its margin under load wrote,
	// and whose scores hold the margin, not a time.
	const slack = core.QuietFloor + clockEvery + 100*time.Millisecond
	time.Sleep(time.Until(lastKill.Add(bound + time.Second + minTrimEvery + slack)))
	now = serverMicros(t, client)
	left, oldest := 0, now
	for m, score := range calls(t, client, f.base.Key) {
		oldest = min(oldest, score)
		if _, dead := isDead(m[:min(len(m), prefixLen)]); dead {
			left++
		}
		if score <= now-(w+time.Second+slack).Microseconds() {
			t.Errorf("member %x is %s old, past the window (%s) plus the 1s before deletion plus %s", m, fmtMicros(now-score), w, slack)
		}
	}
	// (c) Capacity back: the survivors' admissions after the last kill.
	after := f.scores(func(a fleetAdmit) bool { return a.p.killedAt.IsZero() && a.score > k })
	recovery := "never"
	if i := firstFullWindow(after, limit, w.Microseconds()); i < 0 {
		t.Errorf("after the last kill the survivors never got %d admissions in a window of %s (%d admissions)", limit, w, len(after))
	} else {
		r := time.Duration(after[i]-k) * time.Microsecond
		recovery = fmt.Sprintf("%s (window full at %s)", r.Round(time.Millisecond), fmtMicros(after[i+limit-1]-k))
		if r > bound+200*time.Millisecond {
			t.Errorf("the first window of %d survivor admissions began %s after the last kill, past the crash bound %s", limit, r, bound)
		}
	}
	f.stopAll()
	o := f.verify()
	rejected := int64(0)
	f.mu.Lock()
	for _, p := range f.procs {
		rejected += p.rejected
	}
	f.mu.Unlock()
	t.Logf("outcome: %d kills (%d mid-reservation, leaving %d rejected claims in Redis), %s; at the crash bound %d dead members left (none counting), %d left after bound+1s+trim (oldest member %s old); the last victim held %d slots up to %s ahead, survivors' first full window began %s after the kill (crash bound %s)",
		kills, mids, rejected, o, behind, left, fmtMicros(now-oldest), held, fmtMicros(furthest), recovery, bound)
}

// firstFullWindow returns the index of the first of limit consecutive sorted scores
// spanning less than w (limit calls in one window), or -1.
func firstFullWindow(sorted []int64, limit int, w int64) int {
	for i := 0; i+limit-1 < len(sorted); i++ {
		if sorted[i+limit-1]-sorted[i] < w {
			return i
		}
	}
	return -1
}
