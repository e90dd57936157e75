package throttler

import (
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// waiter is one call waiting for quota in this process (a wait of any face,
// or an AllowN). n, deadline, cause, now, rank (but its tag), lead, wake
// and wantLease are set when the call begins; the other fields change
// under the Throttler's mu.
type waiter struct {
	n        int
	deadline time.Time // zero without one
	cause    error     // ErrMaxWait when WithMaxWait set deadline, nil when ctx did
	now      bool      // AllowN: admitted now or refused, never given a later slot
	rank     rank
	lead     time.Duration // returns up to this much before a slot reserved through Redis (see leadFor)
	wake     chan struct{}
	counted  bool // it counts as waiting (see WithMaxQueue); under mu
	// Woken late: how many times in a row, and the margin its next claims
	// ask for (µs; see internal/core's margin.go). Under mu.
	lates int
	slack int64

	res    reservation // replaced whole at each step, never edited field by field
	caller presence

	// WithInFlight: the call wants a place in flight (a WaitN does not);
	// lease is the place it holds, leaseTry the one its round trip in
	// flight asks for.
	wantLease       bool
	lease, leaseTry string

	// Tenants: how many times it was claimed while a tenant was held to a
	// cap, each at the soonest slot (see soonTries). Under mu.
	soonTries int
}

// reservation is where a call stands: one value, replaced whole, so that
// nothing said of one reservation (go at once, reserved under that limit)
// outlives it.
type reservation struct {
	state   waitState
	members []string  // its members in Redis (in flight, admitted), if any
	stale   []string  // members of its last attempt that did not fit, being given back
	shareAt time.Time // its slot in the local window (on the runtime's clock: see core.LocalWindow); zero = none

	at        time.Time // admitted: the local time at which it may proceed
	score     int64     // admitted through Redis: the server µs it was counted at (0 = admitted without Redis)
	margin    int64     // admitted through Redis: the margin it was counted with (µs; see core.Rules.Margin)
	immediate bool      // admitted: at is "when the reply arrives": go without a timer
	limitGen  int       // admitted: the limit generation it was made in (see sharedState)

	err       error     // failed: why
	retry     time.Time // refused (AllowN): when the calls might have fitted; zero = unknown
	remaining int       // AllowN: room left under the tightest limit by its round trip
}

type waitState uint8

const (
	stQueued   waitState = iota // in t.worker.queue
	stInFlight                  // in a round trip's batch
	stAdmitted                  // holds a slot at res.at
	stFailed                    // res.err says why
	stRefused                   // AllowN only: no room now
)

// presence is how far the caller behind a waiter has gone.
type presence uint8

const (
	present presence = iota
	leaving          // its context ended while its reservation was in flight: it waits for the reply
	gone             // it returned: what it holds is the worker's to give back
)

// rank is where a waiter queues: by its priority, then by its tenant's
// fair order (see fairOrder), unless it queues at the front.
type rank struct {
	prio   Priority
	front  bool    // queues ahead of every WaitN (see wantFront)
	tenant string  // see ContextWithTenant
	mark   string  // its tenant's mark, the suffix of its members' names ("" without a tenant: see tenants.go)
	weight float64 // its tenant's weight, as mark carries it (0 without a tenant: see weightOf)
	tag    float64 // its start tag in the fair order, stamped as it joins the queue
}

// before reports whether w queues ahead of x, which was queued first: an
// AllowN ahead of every WaitN, then a call that queues at the front (see
// wantFront) ahead of every other WaitN, then by priority, then by the
// fair order's start tags.
func (w *waiter) before(x *waiter) bool {
	switch {
	case w.now || x.now:
		return w.now && !x.now
	case w.rank.front || x.rank.front:
		return w.rank.front && !x.rank.front
	case w.rank.prio != x.rank.prio:
		return x.rank.prio < w.rank.prio
	}
	return w.rank.tag < x.rank.tag
}

// fairOrdered reports whether w takes a place in its priority's fair
// order, stamped as it joins the queue and taken back if it leaves it
// unserved (see fairOrder): every WaitN but one that queues at the front.
func (w *waiter) fairOrdered() bool { return !w.now && !w.rank.front }

// needsPlaceLocked reports whether w still has to get a place in flight.
func (w *waiter) needsPlaceLocked() bool { return w.wantLease && w.lease == "" }

// held is every member of the reservation still in Redis.
func (r reservation) held() []string {
	if len(r.stale) == 0 {
		return r.members
	}
	return append(append([]string(nil), r.members...), r.stale...)
}

// queuedAfter is the reservation of a call sent back to the queue: what
// its last attempt added is being given back (see owed.unhold). The
// members of the attempts before it went to owed when those were sent
// back: a call requeued by every failed round trip of a long outage keeps
// one attempt's members, not all of them (seed 21213).
func queuedAfter(r reservation) reservation {
	if len(r.members) == 0 {
		return reservation{state: stQueued, stale: r.stale}
	}
	return reservation{state: stQueued, stale: r.members}
}

// settleLocked gives w its reservation, its caller's presence unchanged
// (see moveLocked).
func (w *waiter) settleLocked(r reservation) { w.moveLocked(r, w.caller) }

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// signal sends on a channel of one value without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// requeueLocked sends w, whose reservation did not hold, back to the queue's
// state: what it holds goes back (see owed.unhold), and what it still has
// in Redis from an earlier attempt stays known (see queuedAfter). The
// caller puts w back in the queue (see workerState.pushFront).
//
// at is where a round trip that succeeded wrote what it holds (a claim
// refused, by the count or for want of a place in flight: see
// round.writtenAt), notInStore when the store removed it already, or 0
// when it may not have been written. Written for sure, it goes back as
// such (core.Attempt.GiveBack), and owed alone gives it back: w keeps no
// stale members, so that its caller, giving up before the next round
// trip, does not remove them plainly first (a give-back as written for
// sure that finds a member gone from a compacted window's set takes it
// for one a compaction moved, out of a bucket where it is another call's
// count: windows of 20 held 21 and 22 units, TestInvariantCompacted's
// newest mode, TestRefusedClaimGivenBackOnce). Given back plainly, a
// refused claim that a compaction moved before the next round trip stayed
// counted in its bucket until the bucket left the window: with
// compactions that move all but the newest few calls, every process's
// refused claims did, and a window's worth of slots went unused (seed
// 45216).
func (w *waiter) requeueLocked(o *owed, local *core.LocalWindow, at int64) {
	o.unhold(w, local, at)
	if at > 0 {
		w.moveLocked(reservation{state: stQueued}, w.caller)
		return
	}
	w.moveLocked(queuedAfter(w.res), w.caller)
}

// freeShareLocked gives back the slot w holds in local, the local window it
// keeps to while sharing (see fallback.recoveredLocked), when w does not
// keep its reservation: the caller then replaces w's reservation with one
// that holds no such slot.
func (w *waiter) freeShareLocked(local *core.LocalWindow) {
	if !w.res.shareAt.IsZero() && local != nil {
		local.Release(w.res.shareAt, w.n)
	}
}

// planError is the error of a call core.Plan failed (see core.Why).
func (w *waiter) planError(d core.Decision) error {
	name := "WaitN"
	if w.now {
		name = "AllowN"
	}
	switch d.Why {
	case core.TooMany:
		return invalidf("%s(%d): more calls at once than the limit, lowered to %d", name, w.n, d.Limit)
	case core.OverCap:
		// Only a lowered limit gets here: WaitN and AllowN check n
		// against the caps under the configured limits.
		return invalidf("%s(%d): more calls at once than priority %s may take (%d) under the limit, lowered to %d (see WithPriorityShare)",
			name, w.n, w.rank.prio, d.Cap, d.Limit)
	}
	return deadlineError(d.At, w.deadline, w.cause)
}
