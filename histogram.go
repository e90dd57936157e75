package throttler

import (
	"sync/atomic"
	"time"
)

// Histogram counts durations in buckets, as Stats reports them. Bounds
// returns the buckets' upper bounds, ascending, one fewer than Counts:
// Counts[i] is how many durations were at most Bounds()[i] and more than
// the bound before (Counts[0]: at most the first bound, negative ones
// included), and the last entry how many were more than every bound. Sum
// is their total (negative ones count as zero). A Histogram is a value:
// Stats stays comparable.
type Histogram struct {
	Counts [len(sendDelayBounds) + 1]uint64
	Sum    time.Duration
}

// Bounds returns the upper bounds of h's buckets: 1ms, 2ms, 5ms, 10ms,
// 20ms, 50ms, 100ms, 200ms, 500ms, 1s, 2s and 5s.
func (Histogram) Bounds() []time.Duration {
	return append([]time.Duration(nil), sendDelayBounds[:]...)
}

// Count returns how many durations h holds.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Quantile returns an upper bound on the q-quantile of h's durations
// (0 < q <= 1): the bound of the first bucket by which a share q of them
// is counted, or -1 when that is the last bucket, which has no bound, and
// 0 when h holds none.
func (h Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if float64(seen) >= q*float64(n) {
			if i == len(sendDelayBounds) {
				return -1
			}
			return sendDelayBounds[i]
		}
	}
	return -1
}

// sendDelayBounds are Stats.Sends.Delay's bucket bounds: from a millisecond,
// well within any buffer, to seconds, a connection that took retries.
var sendDelayBounds = [...]time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second,
}

// delayCounts is a Histogram on sendDelayBounds, counted with atomics.
type delayCounts struct {
	counts [len(sendDelayBounds) + 1]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

// add counts d.
func (h *delayCounts) add(d time.Duration) {
	h.counts[bucketOf(d)].Add(1)
	h.sum.Add(int64(max(d, 0)))
}

// snapshot returns what h counted as a Histogram.
func (h *delayCounts) snapshot() Histogram {
	s := Histogram{Sum: time.Duration(h.sum.Load())}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	return s
}

// add counts d in h.
func (h *Histogram) add(d time.Duration) {
	h.Counts[bucketOf(d)]++
	h.Sum += max(d, 0)
}

// bucketOf is the index of the bucket that counts d.
func bucketOf(d time.Duration) int {
	i := 0
	for i < len(sendDelayBounds) && d > sendDelayBounds[i] {
		i++
	}
	return i
}
