package core

import (
	"math"
	"slices"
	"time"
)

// LocalWindow is what FallbackLocal throttles with while Redis fails: an
// in-process sliding-window log per limit of the Throttler, each at the
// configured share of its limit, with the same invariant as the shared
// window (no window (t-w, t] holds more than the share), over this
// process's calls only. It is not safe for concurrent use (a Throttler
// guards it with its mutex).
//
// Its log is kept on the runtime's own clock (time.Now), never on the local
// one (WithClock's): the share bounds this process's calls in real time, and a
// local clock stepped ahead while Redis failed would otherwise age every call
// of the log at once, and admit a second share within the window. Callers
// convert at the boundary.
type LocalWindow struct {
	Limit int // the smallest share: the most one call may take at once
	logs  []localLog
}

// localLog is one limit's share: at most limit calls in any window of w.
type localLog struct {
	limit int
	w     time.Duration
	times []time.Time // ascending
}

// NewLocalWindow gives every limit of wins share of its calls, rounded
// down, to 0 when the share is less than one call: the shares of every
// process must add up to at most the limit, so a process whose share holds
// no call admits none while Redis fails.
func NewLocalWindow(share float64, wins []Window, buffer time.Duration) *LocalWindow {
	l := &LocalWindow{Limit: math.MaxInt}
	for _, x := range wins {
		n := int(math.Floor(float64(x.Limit) * share))
		l.Limit = min(l.Limit, n)
		l.logs = append(l.logs, localLog{limit: n, w: x.Interval + buffer})
	}
	return l
}

// Slot returns the earliest time, not before now, at which n calls may go
// under every share (1 <= n <= l.limit), placed after every call already
// scheduled.
func (l *LocalWindow) Slot(now time.Time, n int) time.Time {
	at := now
	for i := range l.logs {
		at = later(at, l.logs[i].slot(now, n))
	}
	return at
}

// Take records n calls at at, which slot returned.
func (l *LocalWindow) Take(at time.Time, n int) {
	for i := range l.logs {
		for range n {
			l.logs[i].times = append(l.logs[i].times, at)
		}
	}
}

// Release forgets n calls recorded at at (a caller gave its slot back).
func (l *LocalWindow) Release(at time.Time, n int) {
	for i := range l.logs {
		l.logs[i].release(at, n)
	}
}

func (l *localLog) slot(now time.Time, n int) time.Time {
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

func (l *localLog) release(at time.Time, n int) {
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

// Clone returns a copy of l that shares nothing with it: what a round is
// planned with (see Plan), before the plan's slots are taken in l itself.
func (l *LocalWindow) Clone() *LocalWindow {
	c := &LocalWindow{Limit: l.Limit, logs: make([]localLog, len(l.logs))}
	for i, x := range l.logs {
		c.logs[i] = localLog{limit: x.limit, w: x.w, times: slices.Clone(x.times)}
	}
	return c
}

// Holds reports whether any call in the local window still counts at now.
func (l *LocalWindow) Holds(now time.Time) bool {
	for _, x := range l.logs {
		if k := len(x.times); k > 0 && x.times[k-1].After(now.Add(-x.w)) {
			return true
		}
	}
	return false
}
