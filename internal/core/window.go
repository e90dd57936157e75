package core

import (
	"sort"
	"time"
)

// Window is one limit a Throttler enforces: a sorted set in which no window
// of w microseconds (interval + buffer) holds more than limit members.
type Window struct {
	Key      string
	Limit    int
	Interval time.Duration
	W        int64
	// Bucket, when positive, compacts the window (see Compaction): calls
	// older than Age (µs), and all but the newest Keep calls (when Keep is
	// positive), are counted per bucket of Bucket µs instead of kept as a
	// member each.
	Bucket, Age, Keep int64
}

// CompactFrom is the smallest limit whose window is compacted: below it a
// window keeps a member per call (about 100 bytes each in Redis), from it
// on it keeps a count per bucket for its older calls (see Compaction).
const CompactFrom = 5000

// Buckets is how many buckets a compacted window is cut into: counting a
// bucket that overlaps a window wholly costs a saturated key at most one
// bucket's share of its window, 1/Buckets (0.1%).
const Buckets = 1024

// CompactKeep is how many calls, the newest, a compacted window keeps as
// members whatever their age: a burst faster than the age takes at most
// about that many members (some 200 KB) plus what each process adds
// between two compactions (as many again, see redisstore.Store), not a
// member per call.
const CompactKeep = 2048

// Compaction returns the bucket width and the age (µs) after which a call
// moves into its bucket for a window of w µs holding limit calls, when
// limit is at least from; zero for a window that keeps a member per call.
// The width is w/n, rounded up; the age a quarter of the window, at most a
// minute. A call younger than the age keeps its member (unless CompactKeep
// newer calls came after it): waiters' slots are worked out from its exact
// score (a compacted call stands at its bucket's end), and a give-back
// that cannot say the call was written for sure (one sent again after a
// Redis error) still frees its slot; a compacted call given back is taken
// out of its bucket only when it was (see redisstore.GiveBackScript).
func Compaction(limit int, w int64, from, n int) (bucket, age int64) {
	if from <= 0 || limit < from || n <= 0 {
		return 0, 0
	}
	bucket = max(1, (w+int64(n)-1)/int64(n))
	age = max(1, min(w/4, time.Minute.Microseconds()))
	return bucket, age
}

// InFlight is WithInFlight's bound: at most N calls in flight at once
// across every process, each place held in a lease at Key that expires
// after TTL unless renewed.
type InFlight struct {
	Key string
	N   int
	TTL time.Duration
}

// TrimSlack keeps members 700ms past their window before a trim removes
// them, by the server's own clock as it runs (the redisstore package's
// TrimScript): a round whose estimate lags the server counts up to
// MaxSpread (see margin.go) further back than its window, and no call
// trimmed can have gone within an interval of a call admitted after the
// trim (see margin.go). Each member costs Redis memory for a window and
// TrimSlack: with 1s windows, two windows after a tenant's last call its
// members are gone (issue 43's churn; it was a second, and 2.3-2.5
// windows). The heal's pause (the throttler's heal.go) is MaxSpread
// longer than the lost window's calls, 300ms shorter than with a second.
const TrimSlack = int64(700 * time.Millisecond / time.Microsecond)

// FutureBound is how far past the server's now a member's score can lie
// when a Throttler wrote it: WithReserveAhead is capped well below it. A
// member beyond it (garbage) is ignored when free slots and Usage are
// worked out, and removed by the next trim; until then the count of a
// window of about an hour or longer holds it.
const FutureBound = int64(time.Hour / time.Microsecond)

// DebtPrefix starts the members a Settle adds as debt, so that Usage can
// tell them from calls (they count the same).
const DebtPrefix = "\x00d"

// Peak is the most of scores (ascending) in any one window (t-w, t] that
// holds g, that is with g <= t < g+w: what redisstore.PeakScript computes
// for an exact attempt (see Reply.Peaks). Such a window holds the most at
// t = g or at a score, and both its ends only move forward as t does.
func Peak(scores []int64, g, w int64) int64 {
	var peak int64
	lo, hi := 0, 0 // the window's scores are scores[lo:hi]
	at := func(t int64) {
		for hi < len(scores) && scores[hi] <= t {
			hi++
		}
		for lo < hi && scores[lo] <= t-w {
			lo++
		}
		peak = max(peak, int64(hi-lo))
	}
	at(g)
	for _, s := range scores {
		if s > g && s < g+w {
			at(s)
		}
	}
	return peak
}

// WindowMicros is how long a call holds its slot, in the whole server
// microseconds scores are kept in, for a window of d: d rounded up (a
// window rounded down would let two calls a fraction of a microsecond less
// than d apart), plus ConversionSlack.
func WindowMicros(d time.Duration) int64 {
	return int64((d+time.Microsecond-1)/time.Microsecond) + ConversionSlack
}

// ConversionSlack covers the conversion of a score to a caller's local clock:
// each process reads its clock to the nanosecond but converts in whole
// microseconds, so two processes may place the same score up to a microsecond
// apart each. Without it, two calls scored exactly one window apart by
// different processes could go up to 2µs less than a window apart.
const ConversionSlack = 2

// Sane returns tail without members scored after limit (server µs):
// garbage beyond FutureBound would otherwise pass for the newest
// calls when slots are worked out.
func Sane(tail []Entry, limit int64) []Entry {
	for i, e := range tail {
		if e.Score > limit {
			return tail[:i]
		}
	}
	return tail
}

// MaxInWindow returns the largest number of scores in any half-open window
// (t-w, t].
func MaxInWindow(scores []int64, w int64) int {
	most, _ := FullestWindow(scores, w)
	return most
}

// FullestWindow returns what MaxInWindow does, and the end t of the
// first window (t-w, t] that holds that many of scores (0 when scores is
// empty).
func FullestWindow(scores []int64, w int64) (most int, end int64) {
	s := append([]int64(nil), scores...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := 0
	for j := range s {
		for s[i] <= s[j]-w {
			i++
		}
		if j-i+1 > most {
			most, end = j-i+1, s[j]
		}
	}
	return most, end
}

// Compacts reports whether a window of c counts its older calls per
// bucket (see Compaction): a give-back of calls written for sure may then
// drop a bucket's count, and must not be sent twice, nor after a plain
// removal of the same calls (see Attempt.Resent).
func (c *Rules) Compacts() bool {
	for _, x := range c.Wins {
		if x.Bucket > 0 {
			return true
		}
	}
	return false
}
