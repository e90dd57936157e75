package throttler

import (
	"context"
	"time"
)

// Wait blocks until one call may proceed under the shared quota, then returns
// nil. It is WaitN(ctx, 1).
func (t *Throttler) Wait(ctx context.Context) error {
	return t.WaitN(ctx, 1)
}

// WaitN blocks until n calls' worth of quota may be used at once, then
// returns nil: the n calls are counted at the moment WaitN returns, in every
// window that holds it.
//
// WaitN returns an error, and counts nothing, when:
//   - n is below 1, or above the smallest limit in force (New's and
//     WithLimit's, the first as lowered by LowerLimit) times the share of
//     ctx's priority (see WithPriorityShare), rounded down, or 1 if that
//     is less: the error wraps ErrInvalidArgument;
//   - ctx ends first, or by the time the call's slot comes (its deadline
//     passed counts, even before ctx.Err says so): the error wraps ctx.Err()
//     (errors.Is(err, ctx.Err()) holds; context.DeadlineExceeded for a
//     deadline ctx has not noticed yet) and whatever was reserved for the
//     call is removed from Redis before WaitN returns. That takes at most
//     two Redis calls, each bounded by 250ms or the Redis timeout if
//     smaller: waiting out the round trip that may be adding the call's
//     members, then removing them. What a hung Redis does not let it
//     remove is removed by a later round trip, and stops counting on its
//     own within the window;
//   - the earliest slot the call can get is after ctx's deadline, or less
//     than a millisecond before it: WaitN returns at once, without
//     sleeping, with an error wrapping context.DeadlineExceeded;
//   - WithMaxWait's bound passes first, or comes before the earliest slot,
//     as for ctx's deadline above: the error also wraps ErrMaxWait;
//   - WithMaxQueue turns the call away: the error wraps ErrQueueFull;
//   - Redis fails and the policy is FailClosed: the error wraps ErrRedis and
//     the Redis error, after at most the Redis timeout per round trip (a
//     Throttler without a sample of the server's clock first takes up to
//     three); or FallbackLocal cannot serve the call (see FallbackLocal):
//     the error wraps ErrRedis.
//
// WaitN returns at the call's slot: the promise that no window of the API
// holds more than the limit assumes the call reaches the API no earlier
// than its slot and within half the buffer after it (see WithBuffer), give
// or take a network delay that is the same for every call. WaitN keeps its
// own part: a call it would return later than that (a machine too loaded
// to wake it in time, the clock estimate corrected since the slot was
// reserved) gives the slot back and reserves again, and one it would
// return early sleeps on. The rest is the caller's: send the call at once,
// on a connection already open. A call that must first dial (TCP and TLS:
// one to three round trips to the API), or wait for a connection of a
// pool, goes that much later; sent d after its slot, past half the
// buffer, it can share a window of the API with calls admitted up to
// d - buffer/2 after that window would have closed for it, and each such
// call can put a window one over the limit. The Transport, and Do, DoCost,
// Wrap and WrapCost for a call they send through net/http, hold the
// request at its connection instead, and take a new slot when the
// connection came too late (see Transport); for any other call, make the
// buffer cover the time between WaitN's return and the call's arrival.
//
// Waiters on one Throttler are served by priority (see
// ContextWithPriority), then in the order they joined the queue; AllowN
// calls go ahead of them all. A waiter whose claim a round trip did not
// admit (refused, or failed under FallbackLocal), or that waited for a
// place in flight (see WithInFlight), goes back to the head of the queue,
// ahead of waiters of any priority; one that gives its slot back (woken
// late, or for a pause or a lowered limit) joins it again by its priority.
// One Redis round trip reserves for as many waiters from the head as fit.
// A waiter given a slot in the future sleeps until then without further
// Redis traffic (but for one sample of the server's clock, should a clock
// passed to WithClock step back meanwhile); a pause or a lowered limit set
// meanwhile, by any replica, reaches it at once (see PauseUntil).
func (t *Throttler) WaitN(ctx context.Context, n int) error {
	_, _, err := t.wait(ctx, "WaitN", n, 0)
	return err
}

// wait is WaitN, named where for errors; it returns the reservation the
// call went with. With wantPlace (and WithInFlight), the call also takes a
// place in flight, whose lease it returns.
func (t *Throttler) wait(ctx context.Context, where string, n int, want waitWants) (res reservation, lease string, err error) {
	if err := usable(t, ctx, where); err != nil {
		return reservation{}, "", err
	}
	start := t.now()
	defer func() { t.stats.wait(ctx, n, start, t.now(), err) }()
	return t.waitSlot(ctx, where, n, want, 0)
}

// waitWants are what a wait asks for besides its slot.
type waitWants uint8

const (
	// wantPlace: a place in flight too, with WithInFlight.
	wantPlace waitWants = 1 << iota
	// wantFront: a call admitted once whose request came to its
	// connection too late for its slot (see sendgate.go): it queues ahead
	// of every wait but AllowN calls, and is neither counted by
	// WithMaxQueue nor bounded by WithMaxWait, for it is no new demand.
	wantFront
)

// waitSlot is wait without counting its outcome in Stats, for a face that
// may wait again before its call goes (see reserveToSend) and counts once.
// With lead, it returns up to lead before a slot reserved through Redis
// (see waiter.leadFor), for a call whose send holds its write until the
// slot comes (see sendgate.go).
func (t *Throttler) waitSlot(ctx context.Context, where string, n int, want waitWants, lead time.Duration) (res reservation, lease string, err error) {
	prio := PriorityFromContext(ctx)
	if err := t.checkN(where, n, prio); err != nil {
		return reservation{}, "", err
	}
	if ctx.Err() != nil {
		return reservation{}, "", ctxError(ctx)
	}
	if t.opt.waits.shadow {
		return shadowSlot(t, ctx, n, prio), "", nil
	}
	w := &waiter{n: n, wake: make(chan struct{}, 1), wantLease: want&wantPlace != 0 && t.lease != nil, lead: lead,
		rank: t.opt.order.rankOf(ctx, prio, want&wantFront != 0)}
	if !w.rank.front {
		var cancel context.CancelFunc
		ctx, cancel = t.opt.withMaxWait(ctx, w)
		defer cancel()
	}
	if d, ok := ctx.Deadline(); ok { // on the local clock (WithClock), not time.Now's
		w.deadline = t.now().Add(time.Until(d))
	}
	if t.opt.waits.maxQueue > 0 && !w.rank.front || !w.deadline.IsZero() {
		if err := w.enter(t); err != nil {
			return reservation{}, "", err
		}
		defer func() {
			t.mu.Lock()
			t.worker.leave(w)
			t.mu.Unlock()
		}()
	}
	if w.wantLease {
		t.mu.Lock()
		t.lease.began()
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.lease.ended(w, err == nil) {
				t.stats.inFlightBy(1)
			}
		}()
	}
	for {
		t.submit(w)
		o, err := w.await(ctx, t)
		if o == again || o == againPaused {
			if ended(ctx) { // its slot went back as its context ended: no other
				return reservation{}, "", w.abandon(ctx, t)
			}
			continue
		}
		if err != nil {
			return reservation{}, "", err
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		return w.res, w.lease, nil
	}
}
