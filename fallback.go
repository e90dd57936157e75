package throttler

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
)

// retryRedisAfter is how long FailOpen and FallbackLocal serve calls without
// trying Redis after it failed.
const retryRedisAfter = time.Second

// failLocked applies the failure policy after a round trip (or the first
// clock sample) failed. batch is the round's batch, a its attempt (both nil
// when no reservation was sent). It returns how long the worker sleeps.
func (t *Throttler) failLocked(batch []*waiter, a *core.Attempt, err error) time.Duration {
	for _, w := range batch {
		// Its place may or may not have been granted.
		if t.lease != nil {
			t.giveLeaseBackLocked(w.leaseTry)
			w.leaseTry = ""
		}
	}
	if a != nil {
		// What a was to give back, and what it added for batch, goes
		// with every round trip until one after a success (see owed).
		t.owed.doubt(a, batch)
		for _, e := range a.Adds {
			if !isOurs(e.Member, batch) {
				t.owed.replay = append(t.owed.replay, e) // admitted without Redis: count it once Redis answers
			}
		}
	}
	t.known.near = true
	t.health.closed = redisstore.Closed(err)
	switch t.opt.policy.kind {
	case policyOpen:
		t.logRedis(err, "calls admitted without throttling")
		t.failOpenLocked(batch)
	case policyLocal:
		t.logRedis(err, "calls throttled locally")
		if d, serving := t.fallBackLocked(batch, err); serving {
			return d
		}
	default:
		t.logRedis(err, "calls fail")
		t.failAllLocked(batch, err)
	}
	return t.idleAfterFailureLocked(err)
}

// failOpenLocked admits the batch's calls without Redis (FailOpen). Their
// members, which may have reached Redis, were given back (see failLocked):
// a clock estimate a step made wrong may have scored them far ahead, where
// they would count at the wrong time. The calls count anew, at the time
// they go, on the runtime's clock (see serverByRuntime).
func (t *Throttler) failOpenLocked(batch []*waiter) {
	t.degradeLocked()
	now := t.now()
	at := t.afterPauseLocked(now)
	rtAt := time.Now().Add(at.Sub(now))
	for _, w := range batch {
		if t.admitDegradedLocked(w, at, time.Time{}) && w.caller == present {
			t.replayLocked(rtAt, at, w.n)
		}
	}
	t.serveDegradedLocked(now)
}

// fallBackLocked queues the batch's calls again for the local window
// (FallbackLocal), and serves it; serving reports that calls still wait,
// to be served again after d.
func (t *Throttler) fallBackLocked(batch []*waiter, err error) (d time.Duration, serving bool) {
	t.degradeLocked()
	var requeue []*waiter
	for _, w := range batch {
		if w.caller != present {
			t.unholdLocked(w)
			w.settle(reservation{state: stFailed, err: redisError(err), stale: w.res.stale})
			continue
		}
		t.requeueLocked(w)
		requeue = append(requeue, w)
	}
	t.pushFrontLocked(requeue)
	d = t.serveDegradedLocked(t.now())
	return d, len(t.queue) > 0
}

// failAllLocked fails the batch's calls and the whole queue with err
// (FailClosed): while Redis hangs, no waiter should sit out one timeout
// per batch ahead of it.
func (t *Throttler) failAllLocked(batch []*waiter, err error) {
	e := redisError(err)
	for _, w := range batch {
		stale := w.res.held() // a leaving caller gives them back itself
		if w.caller != leaving {
			t.owed.giveBack = append(t.owed.giveBack, w.res.members...)
			stale = w.res.stale
		}
		w.settle(reservation{state: stFailed, err: e, stale: stale})
	}
	for _, w := range t.queue {
		w.settle(reservation{state: stFailed, err: e, stale: w.res.stale})
	}
	t.queue = t.queue[:0]
}

// admitDegradedLocked admits w without Redis, to go at at (its slot in the
// local window at shareAt, when FallbackLocal gave it one). An AllowN that
// could only go later is refused instead. It reports whether w was admitted.
func (t *Throttler) admitDegradedLocked(w *waiter, at, shareAt time.Time) bool {
	if w.now && at.After(t.now()) {
		w.settle(reservation{state: stRefused, retry: at, stale: w.res.stale})
		return false
	}
	// A reservation settled here is not one a reply just made: it goes
	// at its time, on a timer.
	w.settle(reservation{state: stAdmitted, at: at, epoch: t.shared.epoch, shareAt: shareAt, stale: w.res.stale})
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
func (t *Throttler) idleAfterFailureLocked(err error) time.Duration {
	if len(t.queue) > 0 {
		return 0
	}
	if redisstore.Closed(err) {
		t.owed.replay, t.owed.unscored, t.owed.healPause, t.owed.giveBack, t.owed.recheck = nil, nil, 0, nil, nil
		return 0
	}
	now, rtNow := t.now(), time.Now()
	if len(t.owed.giveBack) > 0 || len(t.owed.recheck) > 0 {
		// On the runtime's clock: a local clock that stepped ahead would
		// give them up at once.
		if t.owed.giveUpAt.IsZero() {
			t.owed.giveUpAt = rtNow.Add(t.opt.ahead + time.Duration(t.longestW())*time.Microsecond)
		}
		// A member a failed round trip added may lie further ahead than
		// reserve-ahead, scored by an estimate a clock step had made
		// wrong: it counts until its own score has left the longest window.
		aged := t.owed.latest+t.longestW() <= t.clock.serverByRuntime(rtNow, now)
		if !rtNow.Before(t.owed.giveUpAt) && aged {
			// They stop counting on their own, within the crash bound.
			t.owed.giveBack, t.owed.recheck, t.owed.latest = nil, nil, 0
		}
	}
	t.trimReplayLocked(t.clock.server(now))
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
func (t *Throttler) serveDegradedLocked(now time.Time) time.Duration {
	retry := time.Until(t.health.degraded)
	start := t.afterPauseLocked(now)
	if t.opt.policy.kind == policyOpen {
		for _, w := range t.queue {
			t.admitDegradedLocked(w, start, time.Time{})
		}
		t.queue = t.queue[:0]
		return retry
	}
	horizon := now.Add(t.opt.ahead)
	rtNow := time.Now() // the local share's clock at now (see localWindow)
	sleep := retry
	rest := t.queue[:0]
	blocked := false // a WaitN waits for its slot to come within reach: so do those behind it
	for _, w := range t.queue {
		if blocked && !w.now {
			rest = append(rest, w)
			continue
		}
		if w.n > t.local.limit {
			w.settle(reservation{state: stFailed, stale: w.res.stale, err: redisError(fmt.Errorf(
				"%d calls at once exceed the local fallback's %d per window", w.n, t.local.limit))})
			continue
		}
		rtAt := t.local.slot(rtNow.Add(start.Sub(now)), w.n)
		at := now.Add(rtAt.Sub(rtNow))
		if w.now && at.After(now) {
			w.settle(reservation{state: stRefused, retry: at, stale: w.res.stale})
			continue
		}
		if !w.deadline.IsZero() && tooLate(at, w.deadline) {
			w.settle(reservation{state: stFailed, stale: w.res.stale, err: deadlineError(at, w.deadline, w.cause)})
			continue
		}
		if at.After(horizon) {
			sleep = min(sleep, at.Sub(horizon)+t.jitter(t.rng))
			blocked = true
			rest = append(rest, w)
			continue
		}
		t.local.take(rtAt, w.n)
		t.replayLocked(rtAt, at, w.n)
		t.admitDegradedLocked(w, at, rtAt)
	}
	clear(t.queue[len(rest):])
	t.queue = rest
	t.trimReplayLocked(t.clock.server(now))
	return max(sleep, time.Millisecond)
}

// replayLocked notes n calls admitted without Redis, going at rt on the
// runtime's clock (at on the local one), to count in Redis once it
// answers; a closed client never will, and then nothing is kept. They are
// scored on the runtime's clock, for the local one may have stepped since
// the last sample (see serverByRuntime); before any sample, once one
// comes in (see scoreReplaysLocked).
func (t *Throttler) replayLocked(rt, at time.Time, n int) {
	if t.health.closed {
		return
	}
	if !t.clock.anchored() {
		for range n {
			t.owed.unscored = append(t.owed.unscored, rt)
		}
		return
	}
	serverAt := t.clock.serverByRuntime(rt, at)
	for range n {
		t.owed.replay = append(t.owed.replay, core.Entry{Score: serverAt, Member: t.ids.next()})
	}
}

// scoreReplaysLocked scores the calls admitted without Redis before any
// clock sample, once one came in.
func (t *Throttler) scoreReplaysLocked() {
	if len(t.owed.unscored) == 0 || !t.clock.anchored() {
		return
	}
	for _, rt := range t.owed.unscored {
		t.owed.replay = append(t.owed.replay, core.Entry{Score: t.clock.serverByRuntime(rt, time.Time{}), Member: t.ids.next()})
	}
	t.owed.unscored = t.owed.unscored[:0]
}

// trimReplayLocked forgets replayed admissions that no longer matter to any
// window (the longest limit's included), which bounds the journal to about
// one window of calls.
func (t *Throttler) trimReplayLocked(serverNow int64) {
	keep := t.owed.replay[:0]
	for _, e := range t.owed.replay {
		if e.Score > serverNow-t.longestW() {
			keep = append(keep, e)
		}
	}
	clear(t.owed.replay[len(keep):])
	t.owed.replay = keep
	since := time.Duration(t.longestW()) * time.Microsecond
	t.owed.unscored = slices.DeleteFunc(t.owed.unscored, func(rt time.Time) bool { return time.Since(rt) > since })
}

// degradeLocked stops trying Redis for a while after it failed, under the
// FailOpen and FallbackLocal policies.
func (t *Throttler) degradeLocked() {
	if t.health.degraded.IsZero() {
		t.stats.degraded(true)
	}
	t.health.degraded = time.Now().Add(retryRedisAfter)
}

// recovered notes a successful round trip.
func (t *Throttler) recovered() {
	if !t.health.degraded.IsZero() {
		t.health.degraded = time.Time{}
		t.opt.logger.Info("throttler: redis answered again", slog.String("key", t.wins[0].Key))
		if t.opt.policy.kind == policyLocal {
			// Other processes may still be admitting calls locally, and
			// write them back only when they next try Redis (at most
			// retryRedisAfter from now). Until then Redis's counts miss
			// them: keep to this process's share of the limit, in the
			// local window, as well as to Redis's.
			t.health.shareUntil = t.now().Add(retryRedisAfter + 250*time.Millisecond)
		}
		t.stats.degraded(false)
	}
}

// requeueLocked sends w, whose reservation did not hold, back to the
// queue's state: what it holds goes back (see unholdLocked), and what it
// still has in Redis from an earlier attempt stays known (see
// queuedAfter). The caller puts w back in the queue (see pushFrontLocked).
func (t *Throttler) requeueLocked(w *waiter) {
	t.unholdLocked(w)
	w.res = queuedAfter(w.res)
}

// pushFrontLocked puts ws back at the head of the queue, in their order:
// waiters that had their turn go before those that joined since.
func (t *Throttler) pushFrontLocked(ws []*waiter) {
	if len(ws) > 0 {
		t.queue = append(ws, t.queue...)
	}
}

// unholdLocked gives back what w's reservation holds: its members leave
// Redis with the next round trip, and its slot in the local share is
// freed. The caller then replaces w's reservation.
func (t *Throttler) unholdLocked(w *waiter) {
	t.owed.giveBack = append(t.owed.giveBack, w.res.members...)
	t.dropLocalLocked(w)
}

// dropLocalLocked gives back the local-window slot w holds while sharing
// (see recovered), when w does not keep its reservation: the caller then
// replaces w's reservation with one that holds no such slot.
func (t *Throttler) dropLocalLocked(w *waiter) {
	if !w.res.shareAt.IsZero() && t.local != nil {
		t.local.release(w.res.shareAt, w.n)
	}
}

// afterPauseLocked returns now, or the end of the shared pause known to be
// in force: a pause learned before Redis failed still holds.
func (t *Throttler) afterPauseLocked(now time.Time) time.Time {
	if t.shared.pausedTill > t.clock.server(now) {
		return t.clock.local(t.shared.pausedTill)
	}
	return now
}
