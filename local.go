package throttler

import (
	"slices"
	"time"
)

// localWindow is the in-process sliding-window log FallbackLocal throttles
// with while Redis fails: the same invariant as the shared window (no window
// (t-w, t] holds more than limit calls), over this process's calls only.
// It is guarded by the Throttler's mu.
type localWindow struct {
	limit int
	w     time.Duration
	times []time.Time // ascending
}

func newLocalWindow(limit int, w time.Duration) *localWindow {
	return &localWindow{limit: limit, w: w}
}

// slot returns the earliest time, not before now, at which n calls may go
// (1 <= n <= limit), placed after every call already scheduled.
func (l *localWindow) slot(now time.Time, n int) time.Time {
	cut := 0
	for cut < len(l.times) && !l.times[cut].After(now.Add(-l.w)) {
		cut++
	}
	l.times = slices.Delete(l.times, 0, cut)
	at := now
	if k := len(l.times); k > 0 {
		at = later(at, l.times[k-1])
		// The (limit-n+1)-th latest call must be w behind: then at most
		// limit-n calls share a window with the new ones.
		if i := k - 1 - (l.limit - n); i >= 0 {
			at = later(at, l.times[i].Add(l.w))
		}
	}
	return at
}

// take records n calls at at, which slot returned.
func (l *localWindow) take(at time.Time, n int) {
	for range n {
		l.times = append(l.times, at)
	}
}

// release forgets n calls recorded at at (a caller gave its slot back).
func (l *localWindow) release(at time.Time, n int) {
	for i := len(l.times) - 1; i >= 0 && n > 0; i-- {
		if l.times[i].Equal(at) {
			l.times = slices.Delete(l.times, i, i+1)
			n--
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
