package throttler

import (
	"fmt"
	"slices"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
)

// retryRedisAfter is how long FailOpen and FallbackLocal serve calls without
// trying Redis after it failed.
const retryRedisAfter = time.Second

// failLocked applies the failure policy after a round trip (or the first
// clock sample) failed; rd is the round whose round trip failed (nil
// when no reservation was sent). It returns how long the worker sleeps.
func (f *fallback) failLocked(t *Throttler, rd *round, err error) time.Duration {
	defer t.worker.landed() // after the batch's waiters went back to the queue, if they do
	var batch []*waiter
	var a *core.Attempt
	if rd != nil {
		batch, a = rd.batch, rd.Attempt
	}
	for _, w := range batch {
		// Its place may or may not have been granted.
		if t.lease != nil {
			t.lease.giveBack(w.leaseTry)
			w.leaseTry = ""
		}
	}
	if a != nil {
		// What a was to give back, and what it added for batch, goes
		// with every round trip until one after a success (see owed).
		w := t.rules.LongestW()
		t.owed.doubt(a, batch, t.clock.ServerByRuntime(time.Now(), t.now()), w, w+t.rules.Ahead.Microseconds(), mayCompact(&t.rules, t.st))
		for _, e := range a.Adds {
			if !isOurs(e.Member, batch) {
				t.owed.replayLater(e) // admitted without Redis: count it once Redis answers
			}
		}
	}
	t.known.Doubt()
	f.closed = redisstore.Closed(err)
	switch t.opt.policy.kind {
	case policyOpen:
		t.stats.logRedis(t.now(), err, "calls admitted without throttling")
		f.failOpenLocked(t, batch)
	case policyLocal:
		t.stats.logRedis(t.now(), err, "calls throttled locally")
		if d, serving := f.fallBackLocked(t, batch, err); serving {
			return d
		}
	default:
		t.stats.logRedis(t.now(), err, "calls fail")
		f.failAllLocked(t, batch, err)
	}
	return f.idleAfterFailureLocked(t, err)
}

// failOpenLocked admits the batch's calls without Redis (FailOpen). Their
// members, which may have reached Redis, were given back (see failLocked):
// a clock estimate a step made wrong may have scored them far ahead, where
// they would count at the wrong time. The calls count anew, at the time
// they go, on the runtime's clock (see core.Clock.ServerByRuntime).
func (f *fallback) failOpenLocked(t *Throttler, batch []*waiter) {
	f.degradeLocked(&t.stats)
	now := t.now()
	at := t.shared.after(now, t.clock)
	rtAt := time.Now().Add(at.Sub(now))
	for _, w := range batch {
		if f.admitDegradedLocked(t, w, at, time.Time{}) && w.caller == present {
			f.countLaterLocked(t, rtAt, at, w.n)
		}
	}
	f.serveDegradedLocked(t, now)
}

// fallBackLocked queues the batch's calls again for the local window
// (FallbackLocal), and serves it; serving reports that calls still wait,
// to be served again after d.
func (f *fallback) fallBackLocked(t *Throttler, batch []*waiter, err error) (d time.Duration, serving bool) {
	f.degradeLocked(&t.stats)
	var requeue []*waiter
	for _, w := range batch {
		if w.caller != present {
			t.owed.unhold(w, f.local, 0)
			w.settleLocked(reservation{state: stFailed, err: redisError(err), stale: w.res.stale})
			continue
		}
		w.requeueLocked(&t.owed, f.local, 0)
		requeue = append(requeue, w)
	}
	t.worker.pushFront(requeue)
	d = f.serveDegradedLocked(t, t.now())
	return d, len(t.worker.queue) > 0
}

// failAllLocked fails the batch's calls and the whole queue with err
// (FailClosed): while Redis hangs, no waiter should sit out one timeout
// per batch ahead of it.
func (f *fallback) failAllLocked(t *Throttler, batch []*waiter, err error) {
	e := redisError(err)
	for _, w := range batch {
		stale := w.res.held() // a leaving caller gives them back itself
		if w.caller != leaving {
			t.owed.giveBackLater(w.res.members)
			stale = w.res.stale
		}
		w.settleLocked(reservation{state: stFailed, err: e, stale: stale})
	}
	for _, w := range t.worker.queue {
		w.settleLocked(reservation{state: stFailed, err: e, stale: w.res.stale})
	}
	t.worker.keep(nil)
}

// admitDegradedLocked admits w without Redis, to go at at (its slot in the
// local window at shareAt, when FallbackLocal gave it one). An AllowN that
// could only go later is refused instead. It reports whether w was admitted.
func (f *fallback) admitDegradedLocked(t *Throttler, w *waiter, at, shareAt time.Time) bool {
	if w.now && at.After(t.now()) {
		w.settleLocked(reservation{state: stRefused, retry: at, stale: w.res.stale})
		return false
	}
	// A reservation settled here is not one a reply just made: it goes
	// at its time, on a timer.
	w.settleLocked(reservation{state: stAdmitted, at: at, limitGen: t.shared.limitGen, shareAt: shareAt, stale: w.res.stale})
	return true
}

// idleAfterFailureLocked decides what the worker does after a failure once
// no caller waits. Members it could not give back, and replayed admissions,
// are kept, and retried a second later, only while they still matter and
// the client can still answer: a closed client never will. A member to give
// back matters for reserve-ahead plus the longest window after the first
// failure to give it back: no call of ours is scored further ahead, and
// none counts longer; one that a failed round trip scored further ahead, by
// a clock estimate a step had made wrong, matters until its score has left
// the longest window, and the retry removes it once Redis answers again.
func (f *fallback) idleAfterFailureLocked(t *Throttler, err error) time.Duration {
	if len(t.worker.queue) > 0 {
		return 0
	}
	if redisstore.Closed(err) {
		t.owed.forget()
		return 0
	}
	now, rtNow := t.now(), time.Now()
	t.owed.giveUp(rtNow, t.rules.Ahead, t.rules.LongestW(), t.clock.ServerByRuntime(rtNow, now))
	t.owed.trimReplay(t.clock.Server(now), t.rules.LongestW())
	if t.owed.pending() {
		return retryRedisAfter
	}
	return 0
}

// isOurs reports whether member belongs to a waiter of batch (as opposed to
// a replayed admission).
func isOurs(member string, batch []*waiter) bool {
	for _, w := range batch {
		if slices.Contains(w.res.members, member) {
			return true
		}
	}
	return false
}

// serveDegradedLocked serves the queue without Redis, as the policy says:
// FailOpen admits everyone now; FallbackLocal schedules waiters in the local
// window at the configured share of the limit. It returns how long to sleep
// before the next round (never past the time Redis is tried again).
func (f *fallback) serveDegradedLocked(t *Throttler, now time.Time) time.Duration {
	retry := time.Until(f.degraded)
	start := t.shared.after(now, t.clock)
	if t.opt.policy.kind == policyOpen {
		for _, w := range t.worker.queue {
			f.admitDegradedLocked(t, w, start, time.Time{})
		}
		t.worker.keep(nil)
		return retry
	}
	horizon := now.Add(t.rules.Ahead)
	rtNow := time.Now() // the local share's clock at now (see core.LocalWindow)
	sleep := retry
	rest := t.worker.queue[:0]
	blocked := false // a WaitN waits for its slot to come within reach: so do those behind it
	for _, w := range t.worker.queue {
		if blocked && !w.now {
			rest = append(rest, w)
			continue
		}
		if w.n > f.local.Limit {
			w.settleLocked(reservation{state: stFailed, stale: w.res.stale, err: redisError(fmt.Errorf(
				"%d calls at once exceed the local fallback's %d per window", w.n, f.local.Limit))})
			continue
		}
		rtAt := f.local.Slot(rtNow.Add(start.Sub(now)), w.n)
		at := now.Add(rtAt.Sub(rtNow))
		if w.now && at.After(now) {
			w.settleLocked(reservation{state: stRefused, retry: at, stale: w.res.stale})
			continue
		}
		if !w.deadline.IsZero() && core.TooLate(at, w.deadline) {
			w.settleLocked(reservation{state: stFailed, stale: w.res.stale, err: deadlineError(at, w.deadline, w.cause)})
			continue
		}
		if at.After(horizon) {
			sleep = min(sleep, at.Sub(horizon)+t.rules.Jitter(t.worker.rng))
			blocked = true
			rest = append(rest, w)
			continue
		}
		f.local.Take(rtAt, w.n)
		f.countLaterLocked(t, rtAt, at, w.n)
		f.admitDegradedLocked(t, w, at, rtAt)
	}
	t.worker.keep(rest)
	t.owed.trimReplay(t.clock.Server(now), t.rules.LongestW())
	return max(sleep, time.Millisecond)
}

// countLaterLocked notes n calls admitted without Redis, going at rt on the
// runtime's clock (at on the local one), to count in Redis once it
// answers; a closed client never will, and then nothing is kept.
func (f *fallback) countLaterLocked(t *Throttler, rt, at time.Time, n int) {
	if !f.closed {
		t.owed.countLater(t.clock, t.ids, rt, at, n)
	}
}
