package throttler

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// The worker serves the queue one round at a time: under the mutex it
// snapshots what the Throttler knows and plans the round (plan.go), sends
// the round trip without the mutex, then resolves the reply (resolve.go)
// and applies the outcome to the waiters. One worker runs per Throttler at
// a time; it exits when nothing is left to do, so an idle Throttler holds
// no goroutine.

// submit queues w and, when no worker was running, serves one round in
// the caller's goroutine, which spares an uncontended call two goroutine
// hand-offs, then hands whatever is left (waiters that arrived meanwhile,
// or this caller, if it must wait for a slot) to a worker goroutine.
func (t *Throttler) submit(w *waiter) {
	t.mu.Lock()
	w.res = reservation{state: stQueued, stale: w.res.stale}
	if t.lease.parkBehind(w, t.fallback.isDegraded()) {
		t.stats.placeWait()
		t.mu.Unlock()
		return
	}
	first, inline := t.worker.insert(w)
	t.mu.Unlock()
	if first || w.now {
		// The worker may be sleeping with nobody queued (retrying Redis for
		// its journal), toward a slot for the calls behind, or out a pause
		// after a turn near the limit (see round): a caller now at the
		// head, first or ahead of every call of a lower priority, should
		// not wait that sleep out.
		t.worker.nudge()
	}
	if !inline {
		return
	}
	sleep, more := t.round()
	if !more || t.worker.stopIdle(&t.mu, &t.owed) {
		return
	}
	t.worker.spawn(sleep)
}

// runWorker is the worker goroutine: it serves t's queue until nothing is
// left to do.
func runWorker(t *Throttler, sleep time.Duration) {
	for {
		if sleep > 0 {
			timer := time.NewTimer(sleep)
			select {
			case <-timer.C:
			case <-t.worker.kick:
			}
			timer.Stop()
		}
		var more bool
		sleep, more = t.round()
		if !more || (sleep > 0 && t.worker.stopIdle(&t.mu, &t.owed)) {
			return
		}
	}
}

// round makes one round trip for the head of the queue. It returns how long
// to sleep before the next round, and false when the worker should exit.
func (t *Throttler) round() (time.Duration, bool) {
	t.mu.Lock()
	t.owed.trimReplay(t.clock.server(t.now()), t.longestW())
	if !t.worker.pending(&t.owed) {
		t.worker.running = false
		t.mu.Unlock()
		return 0, false
	}
	if t.opt.policy.kind != policyClosed && t.fallback.isDegraded() {
		d := t.fallback.serveDegradedLocked(t.now())
		t.mu.Unlock()
		return d, true
	}
	t.mu.Unlock()

	if !t.clock.synced() {
		if err := t.sampleClock(context.Background(), firstSamples); err != nil {
			t.mu.Lock()
			defer t.mu.Unlock()
			return t.fallback.failLocked(nil, nil, err), true
		}
	}

	t.mu.Lock()
	now := t.now()
	a, batch, claims, sleep := t.planLocked(now)
	t.mu.Unlock()
	if len(a.Adds) == 0 && len(a.Remove) == 0 && a.Learn.Slots == 0 && a.Loss.Pause == 0 && !a.Margin.Hold {
		t.mu.Lock()
		t.owed.mark = t.owed.mark || a.Loss.Mark // not sent: still to write
		t.mu.Unlock()
		return sleep, true
	}

	r, err := t.send(context.Background(), a)

	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		// A round trip that timed out may still be running, reading a: the
		// next round must not reuse its buffers.
		t.worker.scratch.a = nil
		t.owed.mark = t.owed.mark || a.Loss.Mark // it may not have arrived
		return t.fallback.failLocked(batch, a, err), true
	}
	t.upkeep.round = now
	t.owed.giveUpAt = time.Time{} // what it had to give back went with it
	t.upkeep.done(a, now)
	t.owed.sent(a)
	admitted := t.resolveLocked(a, r, batch, claims)
	return t.nextRoundLocked(a, batch, claims, admitted, sleep), true
}

// nextRoundLocked is how long the worker waits before its next round, once
// a round's reply admitted admitted of its batch; sleep is what the round
// planned.
func (t *Throttler) nextRoundLocked(a *core.Attempt, batch []*waiter, claims []claim, admitted int, sleep time.Duration) time.Duration {
	switch {
	case t.owed.healPause > 0:
		// Redis lost the window: tell the others at once.
		return 0
	case len(batch) == 0:
		// Only upkeep (give-backs, a probe): keep the sleep planned.
		return sleep
	case admitted == len(batch) && a.Room <= 0 && a.Exact && claims[len(claims)-1].score > a.Soonest:
		// Took a full share of slots ahead of their time while other
		// processes may want the same slots: let them have a turn. The
		// pause ends before the next free slot comes near its time
		// (see sharePause), so one process alone loses no slot to it.
		// A share whose last slot was free already is no turn taken
		// from anyone: more may be free, and every slot not taken now
		// is lost for good (the window frees slots as far apart as the
		// calls it holds), so the next round goes at once.
		lead := t.opt.ahead // no free slot known: as if one came within reach now
		if len(t.known.slots) > 0 {
			lead = t.clock.local(t.known.slots[0]).Sub(t.now())
		}
		return t.sharePause(t.worker.rng, lead)
	}
	return 0
}

// planLocked plans the next round (see plan) from a snapshot of what t
// knows, and applies the plan: waiters that fail or are refused are told,
// those that claim a slot get their members and leave the queue for the
// round trip's batch. It returns the attempt to send, the batch with its
// claims, and how long to sleep if the round sends nothing.
func (t *Throttler) planLocked(now time.Time) (a *core.Attempt, batch []*waiter, claims []claim, sleep time.Duration) {
	view := t.clock.view()
	serverNow := view.server(now)
	// One round runs at a time: its buffers are reused from the last one.
	sc := &t.worker.scratch
	if sc.a == nil {
		sc.a = new(core.Attempt)
	}
	t.owed.scoreUnscored(t.clock, t.ids)
	*sc.a = core.Attempt{Remove: append(t.owed.giveBack, t.owed.takeRecheck()...), Adds: append(sc.a.Adds[:0], t.owed.replay...),
		Checks: sc.a.Checks[:0], Lims: t.shared.limits(t.wins, serverNow, sc.a.Lims), Expire: core.Expiry{TTLs: sc.a.Expire.TTLs}, Learn: core.Learning{LowCaps: sc.a.Learn.LowCaps}}
	a = sc.a
	t.owed.giveBack, t.owed.replay = nil, nil
	t.health.lossChecks(a, serverNow, &t.owed)
	t.upkeep.due(a, &t.config, now, t.clock.synced(), t.clock.monotonic, a.Loss.Mark)
	a.Expire.On = a.Expire.On || a.Loss.Pause > 0 // the key must outlive the pause
	a.Expire.First = t.ttl() + time.Duration(max(0, t.shared.pausedTill-serverNow))*time.Microsecond
	a.ClockGen = view.gen
	e := view.errBound()
	t.setMargin(a, e, t.worker.slack(), t.shared.wideAt(serverNow-e))

	in := planIn{now: now, runtime: time.Now(), clock: view, lims: a.Lims, pausedTill: t.shared.pausedTill, known: t.known,
		probe: a.Loss.Probe != "", quietDue: now.Sub(t.upkeep.round) >= t.quiet(), widen: a.Margin.Widen, hold: a.Margin.Hold}
	if now.Before(t.fallback.shareUntil) && t.fallback.local != nil {
		in.sharing, in.shareUntil = t.fallback.local.Clone(), t.fallback.shareUntil
	}
	reqs := sc.reqs[:0]
	for _, w := range t.worker.queue {
		reqs = append(reqs, request{n: w.n, deadline: w.deadline, cause: w.cause, now: w.now, prio: w.prio})
	}
	p := plan(&t.config, in, reqs, sc.plan)
	sc.reqs, sc.plan = reqs, p

	batch, claims = t.applyPlanLocked(a, p), p.claims
	a.Checks = append(a.Checks, p.checks...)
	a.Exact, a.Learn.Slots, a.Soonest, a.Room, a.Learn.PrioMask = p.exact, p.slots, p.soonest, p.room, p.prioMask
	a.Learn.LowCaps = t.lowCaps(a.Learn.PrioMask, a.Learn.Slots, a.Lims, a.Learn.LowCaps)
	sleep = p.sleep
	if p.jitter {
		sleep += t.turnJitter(t.worker.rng, t.known.lost)
		if len(batch) == 0 {
			sleep = min(sleep, t.quiet())
		}
	}
	return a, batch, claims, sleep
}

// applyPlanLocked applies plan p's word on each queued waiter: those that
// fail or are refused are told, those it keeps stay queued, and those that
// claim a slot get their members in a and leave the queue for the batch,
// which it returns (p.claims are the batch's claims, in order).
func (t *Throttler) applyPlanLocked(a *core.Attempt, p planOut) []*waiter {
	sc := &t.worker.scratch
	clear(sc.batch)
	batch := sc.batch[:0]
	rest := t.worker.queue[:0]
	for i, w := range t.worker.queue {
		switch d := p.each[i]; d.verdict {
		case keep:
			rest = append(rest, w)
		case fail:
			w.settle(reservation{state: stFailed, err: d.err, stale: w.res.held()})
		case refuse:
			w.settle(reservation{state: stRefused, retry: d.retry, stale: w.res.held()})
		case claim1:
			if !d.shareAt.IsZero() {
				t.fallback.local.Take(d.shareAt, w.n)
			}
			t.lease.ask(a, w, t.ids)
			first := len(a.Adds)
			members := make([]string, w.n)
			for j := range members {
				members[j] = t.ids.next()
				a.Adds = append(a.Adds, core.Entry{Score: d.score, Member: members[j]})
			}
			w.res = reservation{state: stInFlight, members: members, stale: w.res.stale, shareAt: d.shareAt}
			p.claims[len(batch)].first = first
			batch = append(batch, w)
		}
	}
	clear(t.worker.queue[len(rest):])
	t.worker.queue = rest
	sc.batch = batch
	return batch
}

// resolveLocked applies a reply (see resolve): claims that fit are
// admitted; the others' members are given back, an AllowN's by its caller
// before it returns, a WaitN's with the next round trip, and the WaitN goes
// back to the head of the queue.
func (t *Throttler) resolveLocked(a *core.Attempt, r core.Reply, batch []*waiter, claims []claim) (admitted int) {
	t.learnMetaLocked(r)
	res := t.decideLocked(a, r, batch, claims)
	t.lease.grant(a, r, batch)
	var requeue []*waiter
	for i, w := range batch {
		switch ok, again := t.settleClaimLocked(a, res, i, w, claims[i]); {
		case ok:
			admitted++
		case again:
			requeue = append(requeue, w)
		}
	}
	t.worker.pushFront(requeue)
	if admitted > 0 {
		t.known.lost = 0
	} else if len(requeue) > 0 {
		t.known.lost++
	}
	if a.Learn.Slots > 0 {
		t.known.slots, t.known.capped = res.slots, res.capped
	}
	t.fallback.recoveredLocked()
	if t.hooks.onResolved != nil {
		t.hooks.onResolved(len(requeue))
	}
	return admitted
}

// decideLocked resolves the reply to a (see resolve) with what this
// process knows as it arrives: the limits and pause in force, the margin
// it read, whether Redis lost the window, and which callers are leaving.
func (t *Throttler) decideLocked(a *core.Attempt, r core.Reply, batch []*waiter, claims []claim) resolveOut {
	now := t.now()
	view := t.clock.view()
	arrived := view.server(now) // the reply is in: the server's now
	e := view.errBound()
	wide := int64(0) // the largest margin in force, as this reply read it
	if r.WideEnd > arrived-e {
		wide = r.Wide
	}
	// Measured on the server's clock when the reply read it: a local
	// clock stepped ahead by more than a TTL would otherwise make a window
	// lost a moment ago look long expired.
	at := t.clock.server(now)
	if !r.ServerTime.IsZero() {
		at = r.ServerTime.UnixMicro()
	}
	lost := t.health.noticeLoss(a, r, at, t.ttl().Microseconds(), &t.owed)
	if lost {
		t.healLocked(at)
	}
	sc := &t.worker.scratch
	sc.leaving = sc.leaving[:0]
	for _, w := range batch {
		sc.leaving = append(sc.leaving, w.caller != present)
	}
	sc.lims = t.shared.limits(t.wins, arrived, sc.lims)
	res := resolve(&t.config, resolveIn{a: a, r: r, claims: claims, leaving: sc.leaving, lims: sc.lims,
		pausedTill: t.shared.pausedTill, arrived: arrived, distrust: r.Stepped || lost, wide: wide}, sc.resolved)
	sc.resolved = res
	if len(claims) > 0 { // a round that claimed nothing says nothing about room
		t.known.near = res.near
	}
	return res
}

// settleClaimLocked applies the outcome res gave the claim c of w, the
// i-th of the batch: admitted (ok), refused, given back for a caller gone,
// or to be queued again (again) for another slot or a place in flight.
func (t *Throttler) settleClaimLocked(a *core.Attempt, res resolveOut, i int, w *waiter, c claim) (ok, again bool) {
	switch {
	case w.caller == gone:
		// Its caller returned: what it holds is ours to give back.
		t.owed.unhold(w, t.fallback.local)
		t.lease.drop(w)
		w.settle(reservation{state: stFailed})
	case w.caller == leaving:
		// Its caller is leaving, and gives back what it holds.
		w.settle(reservation{state: stFailed, stale: w.res.held(), shareAt: w.res.shareAt})
	case res.ok[i] && !w.needsPlace():
		w.settle(reservation{state: stAdmitted, members: w.res.members, shareAt: w.res.shareAt,
			at: t.clock.local(c.score), score: c.score, margin: a.Margin.Own, immediate: res.immediate[i],
			epoch: t.shared.epoch, remaining: res.remaining[i]})
		t.health.journal.Add(c.score, w.res.members)
		if t.hooks.onAdmit != nil {
			t.hooks.onAdmit(c.score, w.res.members)
		}
		return true, false
	case w.now:
		// Refused: its caller removes the members before it returns.
		w.freeShare(t.fallback.local)
		retry := time.Time{}
		if len(res.slots) >= w.n && res.slots[w.n-1] > c.score {
			retry = t.clock.local(res.slots[w.n-1])
		}
		if t.shared.pausedTill > c.score {
			retry = maxTime(retry, t.clock.local(t.shared.pausedTill))
		}
		w.settle(reservation{state: stRefused, stale: w.res.held(), retry: retry, remaining: res.remaining[i]})
	default:
		// No slot, or no place in flight: its slot goes back, and it
		// tries again, or waits for a place (see WithInFlight).
		w.requeue(&t.owed, t.fallback.local)
		if !w.needsPlace() {
			return false, true
		}
		t.stats.placeWait()
		return false, t.lease.park(w, a)
	}
	return false, false
}

// workerState is the queue and the worker that serves it, under the
// Throttler's mutex.
type workerState struct {
	queue   []*waiter // not yet reserved: AllowN first, then by priority, FIFO within one
	waiting int       // waits (any face) between enter and leave (see WithMaxQueue)
	running bool      // a worker goroutine serves the queue
	kick    chan struct{}
	rng     *rand.Rand // spreads wake-ups (see jitter, sharePause)
	scratch roundScratch
	spawn   func(sleep time.Duration) // starts a worker goroutine that first sleeps sleep
}

// insert queues w behind every call it does not go before: an AllowN
// (which does not wait behind WaitNs) behind the AllowNs, a WaitN behind
// those of its priority and higher. It reports whether w is first in the
// queue while a worker runs, and whether no worker ran (inline: the
// caller serves one round itself, and counts as the worker meanwhile).
func (q *workerState) insert(w *waiter) (first, inline bool) {
	i := len(q.queue)
	for i > 0 && (w.now && !q.queue[i-1].now || !w.now && !q.queue[i-1].now && q.queue[i-1].prio < w.prio) {
		i--
	}
	q.queue = slices.Insert(q.queue, i, w)
	first = i == 0
	if !q.running {
		q.running, first, inline = true, false, true
	}
	return first, inline
}

// nudge wakes a sleeping worker.
func (q *workerState) nudge() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// pending reports whether the worker has anything to do: callers waiting,
// or something to tell Redis (o).
func (q *workerState) pending(o *owed) bool {
	return len(q.queue) > 0 || o.pending()
}

// stopIdle stops the worker when no caller waits and nothing is left to
// tell Redis (o), rather than have it sleep first; it locks mu, the
// Throttler's, to look. It reports whether the worker stopped.
func (q *workerState) stopIdle(mu *sync.Mutex, o *owed) bool {
	mu.Lock()
	defer mu.Unlock()
	if q.pending(o) {
		return false
	}
	q.running = false
	return true
}

// start starts a worker, with spawn, when there is something to do (see
// pending) and none runs.
func (q *workerState) start(o *owed) {
	if !q.running && q.pending(o) {
		q.running = true
		q.spawn(0)
	}
}

// slack returns the most slack a queued waiter asks for (see margin.go).
func (q *workerState) slack() int64 {
	var slack int64
	for _, w := range q.queue {
		slack = max(slack, w.slack)
	}
	return slack
}

// pushFront puts ws back at the head of the queue, in their order: waiters
// that had their turn go before those that joined since.
func (q *workerState) pushFront(ws []*waiter) {
	if len(ws) > 0 {
		q.queue = append(ws, q.queue...)
	}
}

// roundScratch holds the buffers of a round, reused by the next one.
type roundScratch struct {
	a        *core.Attempt
	reqs     []request
	plan     planOut
	batch    []*waiter
	leaving  []bool
	resolved resolveOut
	lims     []int
}
