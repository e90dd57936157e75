package throttler

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// The worker serves the queue one round at a time: under the mutex it
// snapshots what the Throttler knows and plans the round (core.Plan),
// sends the round trip without the mutex, then resolves the reply
// (core.Resolve) and applies the outcome to the waiters. One worker runs
// per Throttler at a time; it exits when nothing is left to do, so an idle
// Throttler holds no goroutine.

// submit queues w and, when no worker was running, serves one round in
// the caller's goroutine, which spares an uncontended call two goroutine
// hand-offs, then hands whatever is left (waiters that arrived meanwhile,
// or this caller, if it must wait for a slot) to a worker goroutine.
func (t *Throttler) submit(w *waiter) {
	t.mu.Lock()
	w.moveLocked(reservation{state: stQueued, stale: w.res.stale}, w.caller)
	if roundRiders.enter(t, w) {
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
	if !more || t.stopIdle() {
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
		if !more || (sleep > 0 && t.stopIdle()) {
			return
		}
	}
}

// round makes one round trip for the head of the queue. It returns how long
// to sleep before the next round, and false when the worker should exit.
func (t *Throttler) round() (time.Duration, bool) {
	t.mu.Lock()
	t.owed.trimReplay(t.clock.Server(t.now()), t.rules.LongestW())
	if t.worker.stopIdle(&t.owed, &t.news) {
		t.mu.Unlock()
		return 0, false
	}
	if t.opt.policy.kind != policyClosed && t.fallback.isDegraded() {
		d := t.fallback.serveDegradedLocked(t, t.now())
		t.mu.Unlock()
		return d, true
	}
	t.mu.Unlock()

	if !t.clock.Synced() {
		if err := t.sampleClock(context.Background(), firstSamples); err != nil {
			t.stats.redisError(err)
			t.mu.Lock()
			defer t.mu.Unlock()
			return t.fallback.failLocked(t, nil, err), true
		}
	}

	t.mu.Lock()
	now := t.now()
	rd := t.planLocked(now)
	a := rd.Attempt
	t.mu.Unlock()
	if len(a.Adds) == 0 && len(a.Remove) == 0 && len(a.GiveBack) == 0 && a.Learn.Slots == 0 && !roundRiders.hold(a) {
		t.mu.Lock()
		roundRiders.unsent(t, a) // not sent: still to write
		sleep := rd.sleep
		if sleep == 0 { // nothing queued: what keeps the worker is a far member not due yet
			sleep = t.owed.farWait(time.Now())
		}
		t.mu.Unlock()
		return sleep, true
	}

	r, err := t.send(context.Background(), a)

	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		roundRiders.unsent(t, a) // it may not have arrived
		d := t.fallback.failLocked(t, rd, err)
		// A round trip that timed out may still be running, reading a: the
		// next round must not reuse its buffers.
		rd.Attempt = nil
		return d, true
	}
	rd.Reply = r
	t.upkeep.done(a, now)
	t.owed.sent(a)
	t.resolveLocked(rd)
	return t.nextRoundLocked(rd), true
}

// nextRoundLocked is how long the worker waits before its next round, once
// round rd is resolved.
func (t *Throttler) nextRoundLocked(rd *round) time.Duration {
	a, claims := rd.Attempt, rd.Plan.Claims
	switch {
	case t.owed.healing():
		// Redis lost the window: tell the others at once.
		return 0
	case len(rd.batch) == 0 && rd.replan:
		// A rider read what lets queued calls go sooner than planned
		// (a tenant's cap rose, or a scan saw a tenant short of its share,
		// which the next scan may confirm: see tenants.go): plan again at
		// once.
		return 0
	case len(rd.batch) == 0:
		// Only upkeep (give-backs, a probe, a clock sample): keep the
		// sleep planned, counted from when it was planned, for the
		// round trip took part of it (a whole one on every round of a
		// process whose estimate is loose, which samples the clock on
		// each: see core.Rules.SetMargin).
		return max(0, rd.sleep-t.now().Sub(rd.planned))
	case rd.admitted == len(rd.batch) && a.Room <= 0 && a.Exact && claims[len(claims)-1].Score > a.Soonest:
		// Took a full share of slots ahead of their time while other
		// processes may want the same slots: let them have a turn. The
		// pause ends before the next free slot comes near its time
		// (see core.Rules.SharePause), so one process alone loses no slot
		// to it.
		// A share whose last slot was free already is no turn taken
		// from anyone: more may be free, and every slot not taken now
		// is lost for good (the window frees slots as far apart as the
		// calls it holds), so the next round goes at once.
		lead := t.rules.Ahead // no free slot known: as if one came within reach now
		if len(t.known.Slots) > 0 {
			lead = t.clock.Local(t.known.Slots[0]).Sub(t.now())
		}
		return t.rules.SharePause(t.worker.rng, lead, time.Duration(t.clock.View().RTT)*time.Microsecond)
	}
	return 0
}

// planLocked plans the next round (see core.Plan) from a snapshot of what t
// knows, and applies the plan: waiters that fail or are refused are told,
// those that claim a slot get their members and leave the queue for the
// round trip's batch. The round it returns holds the attempt to send, the
// batch with its claims, and how long to sleep if it sends nothing.
func (t *Throttler) planLocked(now time.Time) *round {
	view := t.clock.View()
	serverNow := view.Server(now)
	rd := &t.worker.round // one round runs at a time: its buffers are reused
	if rd.Attempt == nil {
		rd.Attempt = new(core.Attempt)
	}
	a := rd.Attempt
	t.owed.scoreUnscored(t.clock, t.ids)
	// A new attempt on the last one's buffers.
	rtNow := time.Now()
	removals, adds := t.owed.take(a.Adds[:0], len(t.worker.queue) > 0, rtNow, t.clock.ServerByRuntime(rtNow, now))
	*a = core.Attempt{Adds: adds, Checks: a.Checks[:0], Lims: t.shared.limits(t.rules.Wins, serverNow, a.Lims),
		Learn:    core.Learning{LowCaps: a.Learn.LowCaps},
		Removals: removals,
		Upkeep:   core.Upkeep{Expire: core.Expiry{TTLs: a.Expire.TTLs}},
		Riders:   a.Riders.Next()}
	t.upkeep.due(a, &t.config, now, t.clock.Synced(), t.clock.Monotonic)
	a.Expire.First = t.rules.TTL() + time.Duration(max(0, t.shared.pausedTill-serverNow))*time.Microsecond
	a.ClockGen = view.Gen

	in := core.PlanIn{Now: now, Runtime: time.Now(), Clock: view, Lims: a.Lims, PausedTill: t.shared.pausedTill, Known: t.known,
		QuietDue: now.Sub(t.upkeep.round) >= t.rules.Quiet()}
	for _, r := range roundRiders {
		r.ask(t, a, &in)
	}
	if now.Before(t.fallback.shareUntil) && t.fallback.local != nil {
		in.Sharing, in.ShareUntil = t.fallback.local.Clone(), t.fallback.shareUntil
	}
	rd.Reqs = rd.Reqs[:0]
	for _, w := range t.worker.queue {
		rd.Reqs = append(rd.Reqs, core.Request{N: w.n, Deadline: w.deadline, Now: w.now, Prio: w.rank.prio.level(), Tenant: w.tenantTag(), SoonTried: w.soonTries >= soonTries})
	}
	rd.Plan = core.Plan(&t.rules, in, rd.Reqs, rd.Plan)
	p := rd.Plan
	t.applyPlanLocked(rd)
	// Calls queued near the limit listen for the slots others take while
	// this process contends for slots (see core.Known.Announce): alone, it
	// would open a Pub/Sub connection per key for nothing.
	if t.news.queue(p.Exact && len(t.worker.queue) > 0 && t.known.Announce > 0) {
		go runListener(t)
	}
	a.Checks = append(a.Checks, p.Checks...)
	a.Exact, a.Learn.Slots, a.Soonest, a.Room, a.Learn.PrioMask = p.Exact, p.Slots, p.Soonest, p.Room, p.PrioMask
	rd.sleep, rd.planned = p.Sleep, now
	if p.Jitter {
		rd.sleep += t.rules.TurnJitter(t.worker.rng, t.known.Lost)
		if len(rd.batch) == 0 {
			rd.sleep = min(rd.sleep, t.rules.Quiet())
		}
	}
	for _, r := range roundRiders {
		r.claim(t, rd)
	}
	a.Learn.LowCaps = t.rules.LowCaps(a.Learn.PrioMask, a.Learn.Slots, a.Lims, a.Learn.LowCaps)
	return rd
}

// applyPlanLocked applies round rd's plan to each queued waiter: those
// that fail or are refused are told, those it keeps stay queued, and those
// that claim a slot get their members in the attempt and leave the queue
// for rd's batch (the callers of rd.Plan.Claims, in order).
func (t *Throttler) applyPlanLocked(rd *round) {
	a, p := rd.Attempt, rd.Plan
	clear(rd.batch)
	rd.batch = rd.batch[:0]
	rest := t.worker.queue[:0]
	for i, w := range t.worker.queue {
		switch d := p.Each[i]; d.Action {
		case core.Keep:
			rest = append(rest, w)
		case core.Fail:
			w.settleLocked(reservation{state: stFailed, err: w.planError(d), stale: w.res.held()})
		case core.Refuse:
			w.settleLocked(reservation{state: stRefused, retry: d.At, stale: w.res.held()})
		case core.Take:
			if !d.ShareAt.IsZero() {
				t.fallback.local.Take(d.ShareAt, w.n)
			}
			first := len(a.Adds)
			members := make([]string, w.n)
			for j := range members {
				members[j] = t.ids.next() + w.rank.mark
				a.Adds = append(a.Adds, core.Entry{Score: d.Score, Member: members[j]})
			}
			w.moveLocked(reservation{state: stInFlight, members: members, stale: w.res.stale, shareAt: d.ShareAt}, w.caller)
			p.Claims[len(rd.batch)].First = first
			rd.batch = append(rd.batch, w)
			t.worker.fair.served(w.rank.prio.level(), w.rank.tag)
		}
	}
	t.worker.sent(rest, len(rd.batch))
}

// resolveLocked applies a reply (see core.Resolve): claims that fit are
// admitted; the others' members are given back, an AllowN's by its caller
// before it returns, a WaitN's with the next round trip, and the WaitN goes
// back to the head of the queue. It counts the admitted in rd.admitted.
func (t *Throttler) resolveLocked(rd *round) {
	t.shared.learnMeta(rd.Reply, t.Limit(), t.clock.Server(t.now()), t.clock, &t.stats)
	t.decideLocked(rd)
	if rd.Attempt.Learn.Slots > 0 {
		// Before the claims settle: a slot admitted and given back at
		// once (its caller gone, or no place in flight for it) is free
		// in what this reply told (see core.Known.Free).
		t.known.Learn(rd.Outcome)
	}
	rd.admitted = 0
	var requeue []*waiter
	for i, w := range rd.batch {
		switch ok, again := t.settleClaimLocked(rd, i, w); {
		case ok:
			rd.admitted++
		case again:
			requeue = append(requeue, w)
		}
	}
	t.worker.pushFront(requeue)
	t.worker.landed()
	// Claims placed by the store lose no turn to stale slots: there is
	// nothing to announce (see core.Known.Announce).
	t.known.Turn(rd.admitted > 0, len(requeue) > 0, !rd.Reply.PlacedByStore())
	if t.fallback.recoveredLocked(t.now()) {
		t.opt.logger.Info("throttler: redis answered again", slog.String("key", t.rules.Wins[0].Key))
		t.stats.degraded(false)
	}
	if t.hooks.onResolved != nil {
		t.hooks.onResolved(len(requeue))
	}
}

// decideLocked resolves round rd's reply into rd.Outcome (see
// core.Resolve) with what this process knows as it arrives: the limits and
// pause in force, the margin it read, whether Redis lost the window, and
// which callers are leaving.
func (t *Throttler) decideLocked(rd *round) {
	a, r := rd.Attempt, rd.Reply
	view := t.clock.View()
	rr := replyRead{arrived: view.Server(t.now()), errBound: view.ErrBound()} // the reply is in: the server's now
	rr.serverAt = rr.arrived
	if !r.ServerTime.IsZero() {
		rr.serverAt = r.ServerTime.UnixMicro()
	}
	for _, rider := range roundRiders {
		rider.read(t, rd, &rr)
	}
	rd.replan, rd.gone = rr.replan, rr.gone
	arrived := rr.arrived
	rd.leaving = rd.leaving[:0]
	for _, w := range rd.batch {
		rd.leaving = append(rd.leaving, w.caller != present)
	}
	rd.lims = t.shared.limits(t.rules.Wins, arrived, rd.lims)
	rd.Outcome = core.Resolve(&t.rules, core.ResolveIn{A: a, R: r, Claims: rd.Plan.Claims, Leaving: rd.leaving, Lims: rd.lims,
		PausedTill: t.shared.pausedTill, Arrived: arrived, Distrust: r.Stepped || rr.lost, Wide: rr.wide, Refused: rr.refused}, rd.Outcome)
	if len(rd.Plan.Claims) > 0 { // a round that claimed nothing says nothing about room
		t.known.Claimed(rd.Outcome)
	}
}

// settleClaimLocked applies round rd's outcome to w, the i-th of its
// batch: admitted (ok), refused, given back for a caller gone, or to be
// queued again (again) for another slot or a place in flight.
func (t *Throttler) settleClaimLocked(rd *round, i int, w *waiter) (ok, again bool) {
	a, res, c := rd.Attempt, rd.Outcome, rd.Plan.Claims[i]
	switch {
	case w.caller == gone:
		// Its caller returned: what it holds is ours to give back.
		if res.OK[i] {
			t.known.Free(c.Score, w.n, w.rank.prio.level())
		}
		t.owed.unhold(w, t.fallback.local, rd.writtenAt(i))
		roundRiders.drop(t, w)
		w.settleLocked(reservation{state: stFailed})
	case w.caller == leaving:
		// Its caller is leaving, and gives back what it holds.
		w.settleLocked(reservation{state: stFailed, stale: w.res.held(), shareAt: w.res.shareAt})
	case res.OK[i] && !roundRiders.lack(w):
		w.settleLocked(reservation{state: stAdmitted, members: w.res.members, shareAt: w.res.shareAt,
			at: t.clock.Local(c.Score), score: c.Score, margin: ownMargin(a), immediate: res.Immediate[i],
			limitGen: t.shared.limitGen, remaining: res.Remaining[i]})
		t.health.admitted(c.Score, w.res.members)
		if t.hooks.onAdmit != nil {
			t.hooks.onAdmit(c.Score, w.res.members)
		}
		return true, false
	case w.now:
		// Refused: its caller removes the members before it returns.
		w.freeShareLocked(t.fallback.local)
		retry := time.Time{}
		if len(res.Slots) >= w.n && res.Slots[w.n-1] > c.Score {
			retry = t.clock.Local(res.Slots[w.n-1])
		}
		if t.shared.pausedTill > c.Score {
			retry = maxTime(retry, t.clock.Local(t.shared.pausedTill))
		}
		w.settleLocked(reservation{state: stRefused, stale: w.res.held(), retry: retry, remaining: res.Remaining[i]})
	default:
		// No slot, or no place in flight: its slot goes back, and it
		// tries again, or waits for a place (see WithInFlight).
		if res.OK[i] {
			t.known.Free(c.Score, w.n, w.rank.prio.level())
		}
		w.requeueLocked(&t.owed, t.fallback.local, rd.writtenAt(i))
		if !roundRiders.lack(w) {
			return false, true
		}
		return false, roundRiders.aside(t, w, a)
	}
	return false, false
}

// writtenAt is where round rd's claim i left its members in the store
// (see owed.unhold): at its score; nowhere when the round trip also
// removed them; or 0, not known to be written, when the store placed the
// claims and did not place this one (it wrote nothing, as far as the reply
// tells: a give-back for sure of a member never written would take a
// compacted call of another's out of its bucket).
func (rd *round) writtenAt(i int) int64 {
	switch {
	case rd.gone != nil && rd.gone[i]:
		return notInStore
	case !rd.Reply.InStore(i):
		return 0
	}
	return rd.Plan.Claims[i].Score
}

// workerState is the queue and the worker that serves it, under the
// Throttler's mutex.
type workerState struct {
	queue   []*waiter // not yet reserved: AllowN first, then by priority, FIFO within one
	out     int       // waiters in the round trip under way (its batch), which may come back to the queue
	waiting int       // waits (any face) between enter and leave (see WithMaxQueue)
	running bool      // a worker goroutine serves the queue
	kick    chan struct{}
	rng     *rand.Rand                // spreads wake-ups (see core.Rules.TurnJitter, SharePause)
	round   round                     // the round under way, or the last one: its buffers are reused
	spawn   func(sleep time.Duration) // starts a worker goroutine that first sleeps sleep
	fair    fairOrder                 // the order of each priority's waiters across tenants
}

// insert queues w behind every call it does not go before (see
// waiter.before): an AllowN (which does not wait behind WaitNs) behind the
// AllowNs, a WaitN behind those of its priority and higher, and behind
// every call that queues at the front. It reports whether the running
// worker should wake for w (first in the queue, or of another tenant than
// the head's), and whether no worker ran (inline: the caller serves one
// round itself, and counts as the worker meanwhile).
func (q *workerState) insert(w *waiter) (first, inline bool) {
	if w.fairOrdered() {
		w.rank.tag = q.fair.stamp(w.rank.prio.level(), w.rank.tenant, w.rank.weight, w.n, q.idle())
	}
	i := len(q.queue)
	for i > 0 && w.before(q.queue[i-1]) {
		i--
	}
	q.queue = slices.Insert(q.queue, i, w)
	// A call of another tenant than the head's may go while the head
	// waits for the room its tenant's cap leaves it (see tenants.go): it
	// wakes the worker too.
	first = i == 0 || w.tenantTag() != q.queue[0].tenantTag()
	if !q.running {
		q.running, first, inline = true, false, true
	}
	return first, inline
}

// heldLast moves the queued calls that held reports behind the others of
// their class (alike in how they queue, and of one priority: see
// waiter.before), and puts the held calls of each class in their fair
// order (by start tag); the calls not held keep their order. A rider
// holds calls back so (see uncappedFirst); insert places a call by before
// alone, and the next round that holds calls back moves it.
//
// The calls not held keep their order: a call a cap held back keeps its
// early start tag, and once its cap lapses it must not go ahead of the
// calls that came later (seed 812). The held calls are sorted: calls not
// held at one round may all be held at the next, and must then be in
// their fair order (seed 64760: a flood's 12 calls, not held while no
// scan had seen the flood, went ahead of three light tenants' calls held
// by their caps; once the flood was capped too, its calls kept their
// places ahead of older calls with earlier tags, and took every other
// slot of the process for minutes).
func (q *workerState) heldLast(held func(*waiter) bool) {
	order := func(a, b *waiter) int {
		switch ha, hb := held(a), held(b); {
		case ha != hb && hb:
			return -1
		case ha != hb:
			return 1
		case ha:
			return cmp.Compare(a.rank.tag, b.rank.tag)
		}
		return 0
	}
	for start := 0; start < len(q.queue); {
		end := start + 1
		for end < len(q.queue) && sameClass(q.queue[start], q.queue[end]) {
			end++
		}
		// Every round that holds calls back comes here: most find their
		// queue in order already, and sort nothing.
		if class := q.queue[start:end]; !slices.IsSortedFunc(class, order) {
			slices.SortStableFunc(class, order)
		}
		start = end
	}
}

// sameClass reports whether a and b queue by their fair order alone (see
// waiter.before): alike in how they queue, and of one priority.
func sameClass(a, b *waiter) bool {
	return a.now == b.now && a.rank.front == b.rank.front && a.rank.prio == b.rank.prio
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
// tell Redis, rather than have it sleep first (see workerState.stopIdle). It
// reports whether the worker stopped.
func (t *Throttler) stopIdle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.worker.stopIdle(&t.owed, &t.news)
}

// stopIdle stops the worker when no caller waits and nothing is left to
// tell Redis (o), and reports whether it did: no call stays queued either,
// so the news listener (n) lingers and ends (the last plan may have left
// calls queued near the limit that have all left since).
func (q *workerState) stopIdle(o *owed, n *newsState) bool {
	if q.pending(o) {
		return false
	}
	q.running = false
	n.queue(false)
	return true
}

// remove takes w out of the queue.
func (q *workerState) remove(w *waiter) {
	q.queue = slices.DeleteFunc(q.queue, func(x *waiter) bool { return x == w })
	if w.fairOrdered() {
		q.fair.unstamp(w.rank.prio.level(), w.rank.tenant, w.rank.weight, w.n, w.rank.tag)
	}
	q.quiet()
}

// keep leaves rest in the queue, in its order: the waiters the queue held
// that rest, which shares the queue's array, does not hold have left it.
func (q *workerState) keep(rest []*waiter) {
	clear(q.queue[len(rest):])
	q.queue = rest
	q.quiet()
}

// sent is keep after a round's plan: out of the waiters that left the
// queue went with the round trip under way, and still wait until landed.
func (q *workerState) sent(rest []*waiter, out int) {
	q.out = out
	q.keep(rest)
}

// landed notes that the round trip under way is over, its batch's waiters
// admitted, failed, or back in the queue.
func (q *workerState) landed() {
	q.out = 0
	q.quiet()
}

// idle reports whether no call waits: none queued, none in the round trip
// under way. Only then does the fair order start afresh (see fairOrder).
func (q *workerState) idle() bool { return len(q.queue) == 0 && q.out == 0 }

// quiet starts the fair order afresh when no call waits, so that it keeps
// no tenant then: remove, keep and landed, which let the last call go,
// call it.
func (q *workerState) quiet() {
	if q.idle() {
		q.fair.reset()
	}
}

// start starts a worker, with spawn, when there is something to do (see
// pending) and none runs.
func (q *workerState) start(o *owed) {
	if !q.running && q.pending(o) {
		q.running = true
		q.spawn(0)
	}
}

// slack returns the most slack a queued waiter asks for (see
// internal/core's margin.go).
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

// round is one round from plan to outcome (see core.Round), with the
// callers of its claims and what the worker made of it.
type round struct {
	core.Round
	batch    []*waiter     // the callers of Plan.Claims, in order
	sleep    time.Duration // planned: how long to sleep when nothing wakes the worker sooner
	admitted int           // how many of batch the reply admitted
	leaving  []bool        // per claim: its caller left while it was in flight
	lims     []int         // the limits in force as the reply arrived
	planned  time.Time     // when the round was planned (local)
	replan   bool          // a rider read what lets queued calls go sooner than planned
	gone     []bool        // per claim (nil: none): its members left the store with the round trip
}
