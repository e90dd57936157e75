package throttler

import (
	"context"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// A call's own side of a wait, on its caller's goroutine: it waits for the
// worker to settle its reservation, sleeps toward its slot, and gives back
// what it holds when it cannot go (see waiter).

// outcome is how a call's wait for its reservation ended.
type outcome uint8

const (
	proceed     outcome = iota // the call goes, or fails with the error returned
	again                      // it queues anew: woken more than half the buffer after its slot
	againPaused                // it queues anew: a shared pause or a lower limit came after its slot was reserved
	refused                    // AllowN: no room now (w.res says more)
)

// enter counts w, about to queue on t, as waiting (see WithMaxQueue), or
// says why it fails at once: its earliest slot lies past its deadline, as
// far as t knows (see tooLateLocked), or the queue is full and no call of a
// lower priority can be shed (see workerState.enter).
func (w *waiter) enter(t *Throttler) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !w.deadline.IsZero() {
		if err := t.tooLateLocked(w); err != nil {
			return err
		}
	}
	if w.rank.front {
		return nil // no new demand: WithMaxQueue does not count it
	}
	return t.worker.enter(w, t.opt.waits.maxQueue)
}

// await waits on t for w's reservation and then for its slot. A WaitN queues
// anew (again, againPaused), its slot given back, when a shared pause
// covers the slot or the limit was lowered after it was reserved, or when
// it was woken later after its slot than its allowance (half the buffer,
// less the clock estimate's error, plus any margin: see internal/core's margin.go), for
// going late would spend the margin the buffer keeps for the network. A
// call that the estimate as it stands now puts early sleeps on. An AllowN
// is refused where a WaitN queues anew.
func (w *waiter) await(ctx context.Context, t *Throttler) (outcome, error) {
	select {
	case <-w.wake:
	case <-ctx.Done():
		return proceed, w.abandon(ctx, t)
	}
	t.mu.Lock()
	res := w.res
	if res.state == stFailed || res.state == stRefused {
		then, o, err := w.endUnadmittedLocked(t)
		t.mu.Unlock()
		then.run(ctx, t)
		return o, err
	}
	t.mu.Unlock()
	if o, reached, err := w.toSlot(ctx, t, res); !reached {
		return o, err
	}
	if ended(ctx) {
		// The slot came as ctx ended (the select above took the timer, or
		// ctx's own timer has yet to fire): the caller would spend the slot
		// on a call its context already killed. It goes back instead.
		return proceed, w.abandon(ctx, t)
	}
	return proceed, nil
}

// toSlot sleeps toward the slot of res, w's admitted reservation, and
// reports whether w reached it, or came within its lead of it (reached; see
// leadFor); when it did not, the outcome and error are await's (see await).
func (w *waiter) toSlot(ctx context.Context, t *Throttler, res reservation) (_ outcome, reached bool, _ error) {
	at, immediate, lead := res.at, res.immediate, w.leadFor(res)
	for {
		woken := false // by news, before at
		if d := at.Sub(t.now()) - lead; d > 0 && !immediate {
			if !w.deadline.IsZero() && core.TooLate(at, w.deadline) {
				w.abandon(ctx, t)
				return proceed, false, deadlineError(at, w.deadline, w.cause)
			}
			if woken = w.sleepToward(ctx, t, d); ctx.Err() != nil {
				return proceed, false, w.abandon(ctx, t)
			}
		}
		immediate = false
		t.mu.Lock()
		if (t.shared.paused(t.clock.Server(res.at)) && t.shared.paused(t.clock.Server(t.now()))) ||
			(res.limitGen != t.shared.limitGen && !res.immediate) {
			// A shared pause began after this slot was reserved (wait it
			// out), or the limit was lowered since: a slot reserved ahead
			// under the higher limit may not fit the lower one.
			then, o := w.unreserveLocked(t, againPaused)
			t.mu.Unlock()
			then.run(ctx, t)
			return o, false, nil
		}
		target, late := t.offScore(res, t.clock)
		if now := t.now(); woken && now.Before(at) {
			// Woken by news that did not concern this slot: sleep on.
			t.mu.Unlock()
			continue
		} else if target.After(now.Add(lead)) {
			// Early, by the estimate as it stands now (it changed since
			// the slot was reserved): sleep on.
			t.mu.Unlock()
			at = target
			continue
		}
		if w.goesBackLocked(t, late) {
			then, o := w.unreserveLocked(t, again)
			t.mu.Unlock()
			then.run(ctx, t)
			return o, false, nil
		}
		t.mu.Unlock()
		return proceed, true, nil
	}
}

// goesBackLocked reports whether w, woken at its slot late by late (0:
// not late), reserves again instead of going: not called yet, its slot
// can go back. Late lateBeforeSlack times in a row, the call asks for a
// margin wide enough for such a wake (see internal/core's margin.go) rather
// than be late for ever on a machine too loaded to wake it in time. A call
// whose place in flight lapsed in Redis (see leases.lost), or is not known
// to be live any more (see leases.live), reserves again too, a new place
// with its slot.
func (w *waiter) goesBackLocked(t *Throttler, late time.Duration) bool {
	if t.lease.lostPlace(w) {
		return true
	}
	if late <= 0 {
		return false
	}
	t.stats.lateWakes.Add(1)
	if w.lates++; w.lates >= lateBeforeSlack {
		w.slack = max(2*w.slack, 2*late.Microseconds())
	}
	return true
}

// leadFor is how long before the slot of res, its admitted reservation,
// w returns: the lead it asked for (see waitSlot) when res was admitted
// through Redis, whose send's gate holds the write until its score (see
// sendgate.go); none when res was admitted without Redis (FailOpen, or
// FallbackLocal's local share), which no gate holds (see gateSend): its
// request would be written as soon as a connection came, before the slot
// it was counted at, where an earlier call of the share's window still
// counts (seed 25031), or before a shared pause's end.
func (w *waiter) leadFor(res reservation) time.Duration {
	if res.score == 0 {
		return 0
	}
	return w.lead
}

// endUnadmittedLocked ends the wait of w, failed or refused (an AllowN):
// whatever of it may still be in Redis (members of an earlier attempt that
// did not fit) leaves with it, after t.mu is released (then).
func (w *waiter) endUnadmittedLocked(t *Throttler) (then afterUnlock, _ outcome, _ error) {
	res := w.res
	held := res.held()
	w.moveLocked(reservation{state: res.state, err: res.err, retry: res.retry, remaining: res.remaining}, gone)
	if isRedis(res.err) {
		t.owed.giveBackLater(held)
		held = nil
	}
	then = afterUnlock{members: held}
	if res.state == stRefused {
		return then, refused, nil
	}
	return then, proceed, res.err
}

// afterUnlock is what a waiter's move under t.mu leaves to do once t.mu
// is released: members to give back (at their score, 0 when not written
// for sure), or the worker to nudge.
type afterUnlock struct {
	members []string
	at      int64
	nudge   bool
}

// run does it, without t.mu.
func (a afterUnlock) run(ctx context.Context, t *Throttler) {
	t.release(ctx, a.members, a.at)
	if a.nudge {
		t.worker.nudge()
	}
}

// sleepToward sleeps d toward w's slot, until news comes (woken),
// ctx ends, or the timer fires; a timer that ran its course while the
// local clock counted less has the clock sampled again.
func (w *waiter) sleepToward(ctx context.Context, t *Throttler, d time.Duration) (woken bool) {
	t.mu.Lock()
	news, listen := t.news.sleep(d)
	if listen {
		go runListener(t)
	}
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
	if fired && ctx.Err() == nil && t.now().Sub(slept) < d-time.Duration(t.rules.EarlyTolerance())*time.Microsecond {
		// The timer ran its course while the local clock (see WithClock)
		// counted less: that clock stepped back, and the estimate, which
		// converts with it until a sample shows the step, would have the
		// call sleep on past its slot by as much. With the step known, the
		// call is late and goes back (see offScore). Should Redis not
		// answer, the estimate stands.
		if err := t.sampleClock(ctx, 1); err != nil {
			t.stats.redisError(err)
		}
	}
	return woken
}

// lateBeforeSlack is how many times in a row a call is woken late before
// its claims ask for a margin that covers such a wake (see internal/core's margin.go): a
// single late wake (a pause of the garbage collector) costs that call a
// new slot; only a machine that keeps waking it late costs every replica
// a wider window.
const lateBeforeSlack = 3

// unreserveLocked gives back the slot an admitted w has not used yet. A
// WaitN queues anew (o says why), its members leaving Redis with the next
// round trip; an AllowN is refused, its members removed once t.mu is
// released (then), before it returns.
func (w *waiter) unreserveLocked(t *Throttler, o outcome) (then afterUnlock, _ outcome) {
	members, at := w.res.members, w.res.score
	t.health.forget(members, &t.hooks)
	t.known.Free(at, w.n, w.rank.prio.level())
	if w.now {
		w.freeShareLocked(t.fallback.local)
		w.moveLocked(reservation{state: stRefused, retry: t.shared.after(t.now(), t.clock)}, gone)
		return afterUnlock{members: members, at: at}, refused
	}
	w.requeueLocked(&t.owed, t.fallback.local, 0)
	// Give the slot back now, not with the round that reserves the call
	// again (after a pause, that may be far off): until it is gone, the
	// window counts a call that never went, and so do the readings of an
	// API's counter (see Transport.Counters).
	return afterUnlock{nudge: true}, o
}

// abandon handles a caller whose ctx ended: it removes w from t's
// queue, or gives back what was reserved for it, and returns the ctx error.
func (w *waiter) abandon(ctx context.Context, t *Throttler) error {
	t.mu.Lock()
	switch w.res.state {
	case stQueued:
		t.worker.remove(w)
		t.lease.unpark(w)
		stale := w.res.stale
		w.moveLocked(reservation{state: stFailed}, gone)
		t.mu.Unlock()
		t.worker.nudge()
		t.release(ctx, stale, 0)
		return endedError(ctx)
	case stInFlight:
		// The round trip may be adding this call's members right now: wait
		// for its reply (one round trip) to know what to remove, but no
		// longer than the release timeout.
		w.moveLocked(w.res, leaving)
		t.mu.Unlock()
		timer := time.NewTimer(t.releaseTimeout())
		select {
		case <-w.wake:
		case <-timer.C:
		}
		timer.Stop()
		t.mu.Lock()
		if w.res.state == stInFlight {
			w.moveLocked(w.res, gone) // the worker gives its members back when the reply comes
			t.mu.Unlock()
			return endedError(ctx)
		}
	}
	held, at := w.res.held(), int64(0)
	if w.res.state == stAdmitted {
		t.health.forget(w.res.members, &t.hooks)
		t.known.Free(w.res.score, w.n, w.rank.prio.level())
		if len(w.res.stale) == 0 {
			at = w.res.score // its members only, written for sure
		}
	}
	w.freeShareLocked(t.fallback.local)
	w.moveLocked(reservation{state: stFailed}, gone)
	t.mu.Unlock()
	t.release(ctx, held, at)
	return endedError(ctx)
}
