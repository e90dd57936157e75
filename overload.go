package throttler

import (
	"context"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// Bounded waiting: when the quota runs short, a call that cannot get its
// slot in time fails at once, and so does a call that would join a queue
// already as long as WithMaxQueue allows, unless it can shed a call of a
// lower priority. Both are decided from what the process already knows,
// without a Redis round trip.

// WithMaxWait bounds how long a call that waits (Wait, WaitN, Acquire, Do,
// DoCost, Wrap, WrapCost and a request through a Transport) may wait for
// its slot: as though its context had a deadline d after the call, unless
// its own deadline is sooner. A call whose earliest slot lies further away
// fails at once, without sleeping; one still queued when d has passed
// fails then. Either error wraps ErrMaxWait and context.DeadlineExceeded.
// Default none; d must be positive.
func WithMaxWait(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalidf("WithMaxWait(%s): must be positive", d)
		}
		o.waits.maxWait = d
		return nil
	}
}

// WithMaxQueue bounds how many calls of this Throttler may wait at once
// (Wait, WaitN, Acquire, Do, DoCost, Wrap, WrapCost and requests through a
// Transport: from the call until it returns, sleeping toward a reserved
// slot included; AllowN calls never wait). A call that finds n waiting
// sheds the most recent call of the lowest priority below its own that has
// no slot yet, which fails with an error wrapping ErrQueueFull; when there
// is none, the new call fails at once with such an error instead. Default
// none; n must be positive.
func WithMaxQueue(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return invalidf("WithMaxQueue(%d): must be positive", n)
		}
		o.waits.maxQueue = n
		return nil
	}
}

// withMaxWait derives the context a call waits with under WithMaxWait, and
// notes on w when the maximum wait, not ctx's own deadline, is the one
// that ends it.
func (o *options) withMaxWait(ctx context.Context, w *waiter) (context.Context, context.CancelFunc) {
	if o.waits.maxWait <= 0 {
		return ctx, func() {}
	}
	at := time.Now().Add(o.waits.maxWait)
	if d, ok := ctx.Deadline(); ok && !at.Before(d) {
		return ctx, func() {}
	}
	w.cause = ErrMaxWait
	return context.WithDeadlineCause(ctx, at, ErrMaxWait)
}

// enter admits a new WaitN to the queue, or says why it fails at once:
// maxQueue calls wait already (WithMaxQueue; 0 = no bound) and no call of
// a lower priority can be shed. On success the call counts as waiting
// until leave. (The caller checks the deadline first: see tooLateLocked.)
func (q *workerState) enter(w *waiter, maxQueue int) error {
	if maxQueue > 0 && q.waiting >= maxQueue {
		victim := q.sheddable(w.rank.prio)
		if victim == nil {
			return rejectf(RejectedQueueFull, ErrQueueFull, "throttler: %d calls wait already (WithMaxQueue)", q.waiting)
		}
		q.remove(victim)
		victim.counted = false
		q.waiting--
		victim.settleLocked(reservation{state: stFailed, stale: victim.res.stale,
			err: rejectf(RejectedShed, ErrQueueFull, "throttler: shed from a full queue for a call of priority %s", w.rank.prio)})
	}
	w.counted = true
	q.waiting++
	return nil
}

// leave ends what enter began.
func (q *workerState) leave(w *waiter) {
	if w.counted {
		w.counted = false
		q.waiting--
	}
}

// sheddable returns the queued call to shed for a call of priority p: the
// most recent of the lowest priority below p, or nil.
func (q *workerState) sheddable(p Priority) *waiter {
	var victim *waiter
	for _, x := range q.queue {
		if x.now || !x.counted || x.rank.prio >= p {
			continue
		}
		if victim == nil || x.rank.prio <= victim.rank.prio {
			victim = x
		}
	}
	return victim
}

// tooLateLocked fails a call whose slot cannot come by its deadline, as
// far as this process knows: the calls queued ahead of it take the free
// slots the last reply told of first (see core.Earliest).
func (t *Throttler) tooLateLocked(w *waiter) error {
	now := t.now()
	view := t.clock.View()
	var buf [4]int
	lims := t.shared.limits(t.rules.Wins, view.Server(now), buf[:0])
	if w.n > lims[0] {
		return nil // the worker fails it, with the reason
	}
	ahead := 0
	for _, x := range t.worker.queue {
		if !w.before(x) {
			ahead += x.n
		}
	}
	floor := max(view.Server(now)+view.RTT, t.shared.pausedTill)
	var slots []int64
	if t.known.Near {
		slots = t.known.At(w.rank.prio.level())
	}
	e := view.ErrBound()
	widen, _ := core.Spread(e, t.rules.Margin(e, w.slack), t.shared.wideAt(view.Server(now)-e))
	if at := view.Local(core.Earliest(t.rules.Wins, lims, slots, floor, ahead, w.n, widen)); core.TooLate(at, w.deadline) {
		return deadlineError(at, w.deadline, w.cause)
	}
	return nil
}
