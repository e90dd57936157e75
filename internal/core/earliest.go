package core

import "time"

// Earliest is a lower bound on the slot (server µs) a call of n units can
// get with ahead units of this process's calls served before it, none
// before floor, each counted widen wider each way (see margin.go): its
// last unit is the (ahead+n)-th of the process's calls to come. Each comes
// no sooner than the free slot of its rank the last reply told of (slots,
// nil far from the limit; the last one told, past those), and any limit+1
// calls lie a window apart, so the k-th comes at least a window per limit
// calls after the (k mod limit)-th. Slots others give back can only make
// it sooner; that is what a round trip is for.
func Earliest(wins []Window, lims []int, slots []int64, floor int64, ahead, n int, widen int64) int64 {
	last := ahead + n - 1
	bound := floor
	for i, x := range wins {
		j, laps := last%lims[i], int64(last/lims[i])
		base := floor
		if len(slots) > 0 {
			base = max(base, slots[min(j, len(slots)-1)])
		}
		bound = max(bound, base+laps*(x.W+widen))
	}
	return bound
}

// deadlineMargin is the least time a call's slot must leave before its
// deadline: a caller woken for a slot closer to its deadline than that is
// woken after it as often as not (a timer fires a little late), and has no
// time left for its call anyway; the slot goes back at once instead, to a
// caller that can use it, rather than when it comes.
const deadlineMargin = time.Millisecond

// TooLate reports whether a slot at comes too close to deadline to be
// worth taking (see DeadlineMargin).
func TooLate(at, deadline time.Time) bool { return at.Add(deadlineMargin).After(deadline) }
