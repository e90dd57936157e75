package throttler

import (
	"context"
	"slices"
	"time"

	"github.com/go-throttler/throttler/internal/core"
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
//     WithLimit's, the first as lowered by SetLimit) times the share of
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
//     the Redis error, after at most the Redis timeout; or FallbackLocal
//     cannot serve the call (see FallbackLocal): the error wraps ErrRedis.
//
// WaitN returns at the call's slot: the promise that no window of the API
// holds more than the limit assumes the call reaches the API no earlier
// than its slot and within half the buffer after it (see WithBuffer).
// WaitN keeps its own part: a call it would return later than that (a
// machine too loaded to wake it in time, the clock estimate corrected
// since the slot was reserved) gives the slot back and reserves again, and
// one it would return early sleeps on. What the caller does after WaitN
// returns is the caller's: a call sent d after the slot, past half the
// buffer, can share a window of the API with calls admitted up to
// d - buffer/2 after that window would have closed for it, and each such
// call can put a window one over the limit. Do, Wrap and the Transport
// send right after their admission, and check the slot once more just
// before they do.
//
// Waiters on one Throttler are served by priority (see
// ContextWithPriority), then in the order they joined the queue; AllowN
// calls go ahead of them all. A waiter whose claim Redis refused goes back
// to the head of the queue; one that gives its slot back (woken late, or
// for a pause or a lowered limit) joins it again. One Redis round trip
// reserves for as many waiters from the head as fit. A waiter given a slot
// in the future sleeps until then without further Redis traffic (but for
// one sample of the server's clock, should a clock passed to WithClock
// step back meanwhile); a pause or a lowered limit set meanwhile, by any
// replica, reaches it at once (see PauseUntil).
func (t *Throttler) WaitN(ctx context.Context, n int) error {
	_, _, err := t.wait(ctx, "WaitN", n, false)
	return err
}

// wait is WaitN, named where for errors; it returns the reservation the
// call went with. With place (and WithInFlight), the call also takes a
// place in flight, whose lease it returns.
func (t *Throttler) wait(ctx context.Context, where string, n int, place bool) (res reservation, lease string, err error) {
	start := t.now()
	defer func() { t.stats.wait(n, t.now().Sub(start), err) }()
	return t.waitSlot(ctx, where, n, place)
}

// waitSlot is wait without counting its outcome in Stats, for a face that
// may wait again before its call goes (see reserveToSend) and counts once.
func (t *Throttler) waitSlot(ctx context.Context, where string, n int, place bool) (res reservation, lease string, err error) {
	prio := PriorityFromContext(ctx)
	if err := t.checkN(where, n, prio); err != nil {
		return reservation{}, "", err
	}
	if ctx.Err() != nil {
		return reservation{}, "", ctxError(ctx)
	}
	w := &waiter{n: n, wake: make(chan struct{}, 1), wantLease: place && t.lease != nil, prio: prio}
	ctx, cancel := t.withMaxWait(ctx, w)
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		// On the local clock, which WithClock may set apart from the
		// clock context deadlines are read on (time.Now).
		w.deadline = t.now().Add(time.Until(d))
	}
	if t.opt.maxQueue > 0 || !w.deadline.IsZero() {
		t.mu.Lock()
		err := t.enterLocked(w)
		t.mu.Unlock()
		if err != nil {
			return reservation{}, "", err
		}
		defer func() {
			t.mu.Lock()
			t.leaveLocked(w)
			t.mu.Unlock()
		}()
	}
	if w.wantLease {
		t.mu.Lock()
		t.lease.active++
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.lease.active--
			t.lease.nudge()
			if err != nil {
				// A place its round trip in flight asks for is the
				// worker's to give back, once it knows.
				t.giveLeaseBackLocked(w.lease)
				w.lease = ""
			} else if w.lease != "" {
				t.stats.inFlightBy(1)
			}
		}()
	}
	for {
		t.submit(w)
		o, err := t.await(ctx, w)
		switch o {
		case again, againPaused:
		default:
			if err != nil {
				return reservation{}, "", err
			}
			t.mu.Lock()
			defer t.mu.Unlock()
			return w.res, w.lease, nil
		}
	}
}

// outcome is how a call's wait for its reservation ended.
type outcome uint8

const (
	proceed     outcome = iota // the call goes, or fails with the error returned
	again                      // it queues anew: woken more than half the buffer after its slot
	againPaused                // it queues anew: a shared pause or a lower limit came after its slot was reserved
	refused                    // AllowN: no room now (w.res says more)
)

// await waits for w's reservation and then for its slot. A WaitN queues
// anew (again, againPaused), its slot given back, when a shared pause
// covers the slot or the limit was lowered after it was reserved, or when
// it was woken later after its slot than its allowance (half the buffer,
// less the clock estimate's error, plus any margin: see margin.go), for
// going late would spend the margin the buffer keeps for the network. A
// call that the estimate as it stands now puts early sleeps on. An AllowN
// is refused where a WaitN queues anew.
func (t *Throttler) await(ctx context.Context, w *waiter) (outcome, error) {
	select {
	case <-w.wake:
	case <-ctx.Done():
		return proceed, t.abandon(ctx, w)
	}
	t.mu.Lock()
	res := w.res
	if res.state == stFailed || res.state == stRefused {
		return t.endUnadmittedAndUnlock(ctx, w)
	}
	t.mu.Unlock()
	at, immediate := res.at, res.immediate
	for {
		woken := false // by news, before at
		if d := at.Sub(t.now()); d > 0 && !immediate {
			if !w.deadline.IsZero() && tooLate(at, w.deadline) {
				t.abandon(ctx, w)
				return proceed, deadlineError(at, w.deadline, w.cause)
			}
			if woken = t.sleepToward(ctx, d); ctx.Err() != nil {
				return proceed, t.abandon(ctx, w)
			}
		}
		immediate = false
		t.mu.Lock()
		if (t.shared.paused(t.clock.server(res.at)) && t.shared.paused(t.clock.server(t.now()))) ||
			(res.epoch != t.shared.epoch && !res.immediate) {
			// A shared pause began after this slot was reserved (wait it
			// out), or the limit was lowered since: a slot reserved ahead
			// under the higher limit may not fit the lower one.
			return t.unreserveAndUnlock(ctx, w, againPaused)
		}
		target, late := t.offScoreLocked(res)
		if now := t.now(); woken && now.Before(at) {
			// Woken by news that did not concern this slot: sleep on.
			t.mu.Unlock()
			continue
		} else if target.After(now) {
			// Early, by the estimate as it stands now (it changed since
			// the slot was reserved): sleep on.
			t.mu.Unlock()
			at = target
			continue
		}
		if late > 0 {
			// Not called yet, so the slot can go back. Late
			// lateBeforeSlack times in a row, the call asks for a margin
			// wide enough for such a wake (see margin.go) rather than be
			// late for ever on a machine too loaded to wake it in time.
			t.stats.lateWakes.Add(1)
			if w.lates++; w.lates >= lateBeforeSlack {
				w.slack = max(2*w.slack, 2*late.Microseconds())
			}
			return t.unreserveAndUnlock(ctx, w, again)
		}
		t.mu.Unlock()
		break
	}
	if ended(ctx) {
		// The slot came as ctx ended (the select above took the timer, or
		// ctx's own timer has yet to fire): the caller would spend the slot
		// on a call its context already killed. It goes back instead.
		return proceed, t.abandon(ctx, w)
	}
	return proceed, nil
}

// endUnadmittedAndUnlock ends the wait of w, failed or refused (an AllowN),
// with t.mu held: whatever of it may still be in Redis (members of an
// earlier attempt that did not fit) leaves with it.
func (t *Throttler) endUnadmittedAndUnlock(ctx context.Context, w *waiter) (outcome, error) {
	res := w.res
	held := res.held()
	w.res, w.caller = reservation{state: res.state, err: res.err, retry: res.retry, remaining: res.remaining}, gone
	if isRedis(res.err) {
		t.owed.giveBack = append(t.owed.giveBack, held...)
		held = nil
	}
	t.mu.Unlock()
	t.release(ctx, held)
	if res.state == stRefused {
		return refused, nil
	}
	return proceed, res.err
}

// sleepToward sleeps d toward a call's slot, until news comes (woken),
// ctx ends, or the timer fires; a timer that ran its course while the
// local clock counted less has the clock sampled again (see
// resampleAfterStep).
func (t *Throttler) sleepToward(ctx context.Context, d time.Duration) (woken bool) {
	t.mu.Lock()
	news := t.sleepLocked(d)
	t.mu.Unlock()
	slept, fired := t.now(), false
	timer := time.NewTimer(d)
	select {
	case <-timer.C:
		fired = true
	case <-news: // a pause or a lowered limit: look again
		woken = true
	case <-ctx.Done():
	}
	timer.Stop()
	t.mu.Lock()
	t.news.wake()
	t.mu.Unlock()
	if fired && ctx.Err() == nil && t.now().Sub(slept) < d-time.Duration(t.earlyTolerance())*time.Microsecond {
		t.resampleAfterStep(ctx)
	}
	return woken
}

// resampleAfterStep takes a sample of the server's clock for a sleeper whose
// timer ran its course while the local clock (see WithClock) counted less:
// that clock stepped back, and the estimate, which converts with it until a
// sample shows the step, would have the call sleep on past its slot by as
// much. With the step known, the call is late and goes back (see
// offScoreLocked). Should Redis not answer, the estimate stands.
func (t *Throttler) resampleAfterStep(ctx context.Context) {
	if err := t.sampleClock(ctx); err != nil {
		t.stats.redisError(err)
	}
}

// lateBeforeSlack is how many times in a row a call is woken late before
// its claims ask for a margin that covers such a wake (see margin.go): a
// single late wake (a pause of the garbage collector) costs that call a
// new slot; only a machine that keeps waking it late costs every replica
// a wider window.
const lateBeforeSlack = 3

// offScoreLocked tells how far from its score the admitted res would go
// now, by the clock estimate as it stands now (see margin.go): the local
// time to go instead when it is early (in the future), and how late it is
// (positive) when later than its allowance, including when the estimate
// got so much worse since that the call cannot be placed within its margin
// at all. A call admitted without Redis, or with a zero buffer, is never
// early or late.
func (t *Throttler) offScoreLocked(res reservation) (target time.Time, late time.Duration) {
	if res.score == 0 || t.opt.buffer <= 0 {
		return time.Time{}, 0
	}
	view := t.clock.view()
	allow := t.allowance(res.margin, view.errBound())
	target = view.local(res.score)
	off := t.now().Sub(target).Microseconds() // > 0: late
	switch {
	case allow < 0:
		return time.Time{}, time.Duration(abs64(off)-allow) * time.Microsecond
	case off < -t.earlyTolerance():
		return target, 0
	case off > allow:
		return time.Time{}, time.Duration(off) * time.Microsecond
	}
	return time.Time{}, 0
}

// unreserveAndUnlock gives back the slot an admitted w has not used yet, and
// unlocks t.mu. A WaitN queues anew (o says why), its members leaving Redis
// with the next round trip; an AllowN is refused, its members removed
// before it returns.
func (t *Throttler) unreserveAndUnlock(ctx context.Context, w *waiter, o outcome) (outcome, error) {
	members := w.res.members
	t.forgetLocked(members)
	if w.now {
		t.dropLocalLocked(w)
		w.res, w.caller = reservation{state: stRefused, retry: t.afterPauseLocked(t.now())}, gone
		t.mu.Unlock()
		t.release(ctx, members)
		return refused, nil
	}
	t.requeueLocked(w)
	t.mu.Unlock()
	// Give the slot back now, not with the round that reserves the call
	// again (after a pause, that may be far off): until it is gone, the
	// window counts a call that never went, and so do the readings of an
	// API's counter (see Transport.Counters).
	t.nudge()
	return o, nil
}

// abandon handles a caller whose ctx ended: it removes the call from the
// queue, or gives back what was reserved for it, and returns the ctx error.
func (t *Throttler) abandon(ctx context.Context, w *waiter) error {
	t.mu.Lock()
	switch w.res.state {
	case stQueued:
		t.queue = slices.DeleteFunc(t.queue, func(x *waiter) bool { return x == w })
		t.unparkWaiterLocked(w)
		stale := w.res.stale
		w.res, w.caller = reservation{state: stFailed}, gone
		t.mu.Unlock()
		t.nudge()
		t.release(ctx, stale)
		return endedError(ctx)
	case stInFlight:
		// The round trip may be adding this call's members right now: wait
		// for its reply (one round trip) to know what to remove, but no
		// longer than the release timeout.
		w.caller = leaving
		t.mu.Unlock()
		timer := time.NewTimer(t.releaseTimeout())
		select {
		case <-w.wake:
		case <-timer.C:
		}
		timer.Stop()
		t.mu.Lock()
		if w.res.state == stInFlight {
			w.caller = gone // the worker gives its members back when the reply comes
			t.mu.Unlock()
			return endedError(ctx)
		}
	}
	held := w.res.held()
	if w.res.state == stAdmitted {
		t.forgetLocked(w.res.members)
	}
	t.dropLocalLocked(w)
	w.res, w.caller = reservation{state: stFailed}, gone
	t.mu.Unlock()
	t.release(ctx, held)
	return endedError(ctx)
}

// forgetLocked notes that admitted members were given back: their call
// did not go.
func (t *Throttler) forgetLocked(members []string) {
	t.health.journal.forget(members)
	if t.onRelease != nil {
		t.onRelease(members)
	}
}

// known is what the last reply told of the room ahead, for the next round
// to plan with. Guarded by the Throttler's mu.
type known struct {
	slots []int64 // next free slots (server µs, 0 = now), when near
	near  bool    // little room was left: reserve exactly (MULTI), learning slots
	// By level: the next free slots of a priority that may fill less than
	// the whole limit (see WithPriorityShare), when learned.
	capped [core.Levels][]int64
	// Turns lost in a row: rounds that claimed slots and got none (others
	// took them first). A process that lost more wakes for the next slots
	// ahead of those that lost fewer (see turnJitter).
	lost int
}

// at returns the free slots known for calls of priority p: its own when
// learned, else those under the whole limit, which are no later.
func (k known) at(p Priority) []int64 {
	if s := k.capped[p.level()]; s != nil {
		return s
	}
	return k.slots
}
