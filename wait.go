package throttler

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"
)

// Wait blocks until one call may proceed under the shared quota, then returns
// nil. It is WaitN(ctx, 1).
func (t *Throttler) Wait(ctx context.Context) error {
	return t.WaitN(ctx, 1)
}

// WaitN blocks until n calls' worth of quota (1 <= n <= limit) may be used at
// once, then returns nil: the n calls are counted at the moment WaitN
// returns, in every window that holds it.
//
// WaitN returns an error, and counts nothing, when:
//   - n is out of range (the error wraps ErrInvalidArgument);
//   - ctx ends first: the error wraps ctx.Err() (errors.Is(err, ctx.Err())
//     holds) and whatever was reserved for the call is removed from Redis
//     before WaitN returns (within a Redis round trip, bounded by 250ms or
//     the Redis timeout if smaller);
//   - the earliest slot the call can get is after ctx's deadline: WaitN
//     returns at once, without sleeping, with an error wrapping
//     context.DeadlineExceeded;
//   - Redis fails and the policy is FailClosed: the error wraps ErrRedis and
//     the Redis error, after at most the Redis timeout.
//
// Waiters on one Throttler are served in the order they called, and one
// Redis round trip reserves for as many of them as fit. A waiter given a
// slot in the future sleeps until then without further Redis traffic.
func (t *Throttler) WaitN(ctx context.Context, n int) (err error) {
	if n < 1 || n > t.minLimit {
		return invalidf("WaitN(%d): n must be in 1..%d", n, t.minLimit)
	}
	if ctx.Err() != nil {
		t.stats.abandoned.Add(1)
		return ctxError(ctx)
	}
	start := t.now()
	defer func() { t.observeWait(n, start, err) }()
	w := &waiter{n: n, wake: make(chan struct{}, 1)}
	if d, ok := ctx.Deadline(); ok {
		// On the local clock, which WithClock may set apart from the
		// clock context deadlines are read on (time.Now).
		w.deadline = start.Add(time.Until(d))
	}
	for late := 0; ; {
		if t.enqueue(w) {
			t.serveInline()
		}
		again, paused, err := t.await(ctx, w, late < maxLateRetries)
		if !again {
			return err
		}
		if !paused {
			late++
		}
	}
}

// maxLateRetries bounds how often one call re-reserves because it was woken
// too late; past it the call goes late rather than starve on a machine too
// loaded to wake it in time.
const maxLateRetries = 8

// enqueue queues w. It returns true when no worker was running: the caller
// then serves the queue itself for one round (serveInline), which spares an
// uncontended call two goroutine hand-offs.
func (t *Throttler) enqueue(w *waiter) (inline bool) {
	t.mu.Lock()
	t.queue = append(t.queue, w)
	first := len(t.queue) == 1
	if !t.running {
		t.running, first, inline = true, false, true
	}
	t.mu.Unlock()
	if first {
		// The worker may be sleeping with nobody queued (retrying Redis for
		// its journal): this caller should not wait that sleep out.
		t.nudge()
	}
	return inline
}

// serveInline runs one round in the caller's goroutine, then hands whatever
// is left (waiters that arrived meanwhile, or this caller, if it must wait
// for a slot) to a worker goroutine.
func (t *Throttler) serveInline() {
	sleep, more := t.round()
	if !more || t.idle() {
		return
	}
	go t.work(sleep)
}

// await waits for w's reservation and then for its slot. It returns again =
// true when w must queue anew, its slot given back: when a shared pause
// covers the slot or the limit was lowered after it was reserved (paused =
// true), or when w was woken more than half the buffer after its slot (and
// retry allows another attempt), for going late would spend the margin the
// buffer keeps for the network.
func (t *Throttler) await(ctx context.Context, w *waiter, retry bool) (again, paused bool, err error) {
	select {
	case <-w.wake:
	case <-ctx.Done():
		return false, false, t.abandon(ctx, w)
	}
	t.mu.Lock()
	state, at, immediate := w.state, w.at, w.immediate
	if state == stFailed {
		// Whatever of this call may still be in Redis (members of an earlier
		// attempt that did not fit) leaves with it.
		err := w.err
		held := append(w.members, w.stale...)
		w.members, w.stale, w.gone = nil, nil, true
		if errors.Is(err, ErrRedis) {
			t.giveBack = append(t.giveBack, held...)
			held = nil
		}
		t.mu.Unlock()
		t.release(ctx, held)
		return false, false, err
	}
	t.mu.Unlock()
	if d := at.Sub(t.now()); d > 0 && !immediate {
		if !w.deadline.IsZero() && at.After(w.deadline) {
			t.abandon(ctx, w)
			return false, false, deadlineError(at, w.deadline)
		}
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return false, false, t.abandon(ctx, w)
		}
	}
	t.mu.Lock()
	if (t.clock.server(at) < t.pausedTill && t.clock.server(t.now()) < t.pausedTill) ||
		(w.epoch != t.limitEpoch && !immediate) {
		// A shared pause began after this slot was reserved (wait it
		// out), or the limit was lowered since: a slot reserved ahead
		// under the higher limit may not fit the lower one.
		t.unreserveLocked(w)
		t.mu.Unlock()
		return true, true, nil
	}
	t.mu.Unlock()
	if late := t.now().Sub(at); retry && t.opt.buffer > 0 && late > t.opt.buffer/2 {
		t.mu.Lock()
		// Not called yet, so the slot can go back; it is removed in the
		// same transaction that reserves the next one.
		t.unreserveLocked(w)
		t.lateWakes++
		t.mu.Unlock()
		return true, false, nil
	}
	return false, false, nil
}

type waitState uint8

const (
	stQueued   waitState = iota // in t.queue
	stInFlight                  // in a round trip's batch
	stAdmitted                  // holds a slot at w.at
	stFailed                    // w.err says why; it may still hold members to give back
)

// waiter is one WaitN call. Its fields are guarded by the Throttler's mu.
type waiter struct {
	n        int
	deadline time.Time // zero without one
	wake     chan struct{}

	state     waitState
	cancelled bool     // the caller left while its reservation was in flight
	gone      bool     // the caller returned: what it holds is the worker's to give back
	members   []string // its members in Redis, if any
	stale     []string // members of its last attempt that did not fit, being given back
	localAt   time.Time
	epoch     int       // the Throttler's limitEpoch when admitted
	at        time.Time // local time at which it may proceed
	immediate bool      // at is "when the reply arrives": go without a timer
	err       error
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// abandon handles a caller whose ctx ended: it removes the call from the
// queue, or gives back what was reserved for it, and returns the ctx error.
func (t *Throttler) abandon(ctx context.Context, w *waiter) error {
	t.mu.Lock()
	if w.state == stQueued {
		t.queue = slices.DeleteFunc(t.queue, func(x *waiter) bool { return x == w })
		stale := w.stale
		w.stale, w.gone = nil, true
		t.mu.Unlock()
		t.nudge()
		t.release(ctx, stale)
		return ctxError(ctx)
	}
	if w.state == stInFlight {
		// The round trip may be adding this call's members right now: wait
		// for its reply (one round trip) to know what to remove, but no
		// longer than the release timeout.
		w.cancelled = true
		t.mu.Unlock()
		timer := time.NewTimer(t.releaseTimeout())
		select {
		case <-w.wake:
		case <-timer.C:
		}
		timer.Stop()
		t.mu.Lock()
		if w.state == stInFlight {
			w.gone = true // the worker gives its members back when the reply comes
			t.mu.Unlock()
			return ctxError(ctx)
		}
	}
	members := append(w.members, w.stale...)
	w.members, w.stale, w.gone = nil, nil, true
	if w.state == stAdmitted {
		t.forgetLocked(members)
	}
	t.dropLocalLocked(w)
	t.mu.Unlock()
	t.release(ctx, members)
	return ctxError(ctx)
}

// unreserveLocked gives back the slot an admitted w has not used yet (its
// members leave Redis with the next round trip) and makes w a queued
// waiter again.
func (t *Throttler) unreserveLocked(w *waiter) {
	t.giveBack = append(t.giveBack, w.members...)
	t.forgetLocked(w.members)
	t.dropLocalLocked(w)
	w.members, w.state, w.at, w.immediate = nil, stQueued, time.Time{}, false
}

// forgetLocked notes that admitted members were given back: their call
// did not go.
func (t *Throttler) forgetLocked(members []string) {
	t.journal.forget(members)
	if t.onRelease != nil {
		t.onRelease(members)
	}
}

// nudge wakes a sleeping worker so that it notices an emptied queue.
func (t *Throttler) nudge() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// work serves the queue until it is empty. One worker runs per Throttler at
// a time; it exits when there is nothing left to do, so an idle Throttler
// holds no goroutine.
func (t *Throttler) work(sleep time.Duration) {
	for {
		if sleep > 0 {
			timer := time.NewTimer(sleep)
			select {
			case <-timer.C:
			case <-t.kick:
			}
			timer.Stop()
		}
		var more bool
		sleep, more = t.round()
		if !more || (sleep > 0 && t.idle()) {
			return
		}
	}
}

// idle stops the worker when no caller waits and nothing is left to tell
// Redis, rather than have it sleep first.
func (t *Throttler) idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pendingLocked() {
		return false
	}
	t.running = false
	return true
}

// pendingLocked reports whether the worker has anything to do: callers
// waiting, or something to tell Redis (members to give back, calls admitted
// without it, a heal pause).
func (t *Throttler) pendingLocked() bool {
	return len(t.queue) > 0 || len(t.giveBack) > 0 || len(t.replay) > 0 || t.healPause > 0
}

// startWorkerLocked starts a worker when there is something to tell Redis
// and none runs: a process that only calls Allow has none otherwise.
func (t *Throttler) startWorkerLocked() {
	if !t.running && t.pendingLocked() {
		t.running = true
		go t.work(0)
	}
}

// round makes one reservation round trip for the head of the queue. It
// returns how long to sleep before the next round, and false when the
// worker should exit.
func (t *Throttler) round() (time.Duration, bool) {
	t.mu.Lock()
	t.trimReplayLocked(t.clock.server(t.now()))
	if !t.pendingLocked() {
		t.running = false
		t.mu.Unlock()
		return 0, false
	}
	if t.opt.policy.kind != policyClosed && t.now().Before(t.degraded) {
		d := t.serveDegradedLocked(t.now())
		t.mu.Unlock()
		return d, true
	}
	t.mu.Unlock()

	if !t.clock.synced() {
		if err := t.syncClock(context.Background()); err != nil {
			t.mu.Lock()
			defer t.mu.Unlock()
			return t.failLocked(nil, nil, err), true
		}
	}

	t.mu.Lock()
	now := t.now()
	serverNow, gen := t.clock.serverGen(now)
	a, batch, claims, sleep := t.planLocked(now, serverNow)
	a.clockGen = gen
	t.mu.Unlock()
	if len(a.adds) == 0 && len(a.remove) == 0 && a.slots == 0 && a.pause == 0 {
		t.mu.Lock()
		t.writeMark = t.writeMark || a.mark // not sent: still to write
		t.mu.Unlock()
		return sleep, true
	}

	r, err := t.exec(context.Background(), a)

	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		// A round trip that timed out may still be running, reading a: the
		// next round must not reuse its buffers.
		t.scratch.a = nil
		t.writeMark = t.writeMark || a.mark // it may not have arrived
		return t.failLocked(batch, a, err), true
	}
	t.lastRound = now
	t.giveUpAt = time.Time{} // what it had to give back went with it
	t.upkeptLocked(a, now)
	admitted := t.resolveLocked(a, r, batch, claims)
	switch {
	case t.healPause > 0:
		// Redis lost the window: tell the others at once.
		return 0, true
	case len(batch) == 0:
		// Only upkeep (give-backs, a probe): keep the sleep planned.
		return sleep, true
	case admitted == len(batch) && a.room <= 0 && a.exact && claims[len(claims)-1].score > a.soonest:
		// Took a full share of slots ahead of their time while other
		// processes may want the same slots: let them have a turn. The
		// pause is short enough for one process alone to take shares
		// faster than slots free, so it costs no throughput. A share whose
		// last slot was free already is no turn taken from anyone: more
		// may be free, and every slot not taken now is lost for good (the
		// window frees slots as far apart as the calls it holds), so the
		// next round goes at once. (The simulation's calm seed 64, one
		// process on 8 per 2.9s, used 83% of the quota with the pause.)
		return t.sharePause(), true
	}
	return 0, true
}

// planLocked picks the batch for the next round trip: waiters from the head
// of the queue, each given the earliest free slot known for it, as long as
// that slot lies within the reserve-ahead horizon and the batch has room.
// Waiters whose slot would be after their deadline fail at once.
func (t *Throttler) planLocked(now time.Time, serverNow int64) (a *attempt, batch []*waiter, claims []claim, sleep time.Duration) {
	// One round runs at a time: its buffers are reused from the last one.
	sc := &t.scratch
	clear(sc.batch)
	if sc.a == nil {
		sc.a = new(attempt)
	}
	*sc.a = attempt{remove: t.giveBack, adds: sc.a.adds[:0], checks: sc.a.checks[:0],
		lims: t.limitsLocked(serverNow, sc.a.lims)}
	a, batch, claims = sc.a, sc.batch[:0], sc.claims[:0]
	defer func() { sc.batch, sc.claims = batch, claims }()
	t.giveBack = nil
	a.adds = append(a.adds, t.replay...)
	t.replay = nil

	room := t.batchUnits()
	// Far from the limit every call fits now: no slots to look up, and no
	// need for a transaction.
	a.exact = t.near
	known := a.exact && t.slots != nil
	// Upkeep is due until a round trip that carried it succeeds (see
	// upkeptLocked): a round that sends nothing, or fails, must not put
	// off the next PEXPIRE, or the key could expire under live members.
	a.trim = now.Sub(t.lastTrim) >= t.trimEvery()
	a.clock = now.Sub(t.lastClock) >= clockEvery || !t.clock.synced() || !t.clock.monotonic
	a.expire = now.Sub(t.lastExpire) >= expireEvery || t.writeMark
	t.lossChecksLocked(a, serverNow)
	a.expire = a.expire || a.pause > 0 // the key must outlive the pause
	sharing := now.Before(t.shareUntil) && t.local != nil
	full := false
	pos := 0
	rest := t.queue[:0]
	// A call admitted now goes when the reply is back: score it then.
	soonest := serverNow + t.clock.roundTrip()
	a.soonest = soonest
	horizon := soonest + t.opt.ahead.Microseconds()
	// No call goes before a shared pause ends; the key lives at least as long.
	floor := max(soonest, t.pausedTill)
	a.ttl0 = t.ttl(t.wins[0]) + time.Duration(max(0, t.pausedTill-serverNow))*time.Microsecond
	if a.exact {
		// Near the limit, other processes may be waiting for the same slots.
		room = min(room, t.fairShare())
	}
	defer func() { a.room = room }()
	for _, w := range t.queue {
		if w.n > a.lims[0] {
			w.state, w.err = stFailed, invalidf("WaitN(%d): more calls at once than the limit, lowered to %d", w.n, a.lims[0])
			w.signal()
			continue
		}
		g := floor
		if known {
			if pos+w.n > len(t.slots) {
				// Beyond what the last reply told: learn more first.
				full = true
				rest = append(rest, w)
				continue
			}
			g = max(floor, t.slots[pos+w.n-1])
		}
		var localAt time.Time
		if sharing {
			// Just back from the fallback: also within this process's share.
			if w.n > t.local.limit {
				g = max(g, t.clock.server(t.shareUntil))
			} else {
				// Any time after the local slot fits it; record the call
				// at the time it will go.
				g = max(g, t.clock.server(t.local.slot(now, w.n)))
				localAt = t.clock.local(g)
			}
		}
		if !w.deadline.IsZero() {
			if at := t.clock.local(g); at.After(w.deadline) {
				w.state, w.err = stFailed, deadlineError(at, w.deadline)
				w.signal()
				continue
			}
		}
		pos += w.n
		// The share bounds what joins a batch, never its first claim: a
		// weighted call larger than the share must still get through.
		if full || g > horizon || (w.n > room && len(batch) > 0) {
			if !full && len(batch) == 0 && g > horizon {
				sleep = t.clock.local(g-t.opt.ahead.Microseconds()).Sub(now) + t.jitter()
			}
			full = true
			rest = append(rest, w)
			continue
		}
		room -= w.n
		if !localAt.IsZero() {
			t.local.take(localAt, w.n)
			w.localAt = localAt
		}
		w.state = stInFlight
		w.members = make([]string, w.n)
		for i := range w.members {
			w.members[i] = t.ids.next()
			a.adds = append(a.adds, entry{score: g, member: w.members[i]})
		}
		batch = append(batch, w)
		claims = append(claims, claim{score: g, n: w.n})
		if len(a.checks) == 0 || a.checks[len(a.checks)-1] != g {
			a.checks = append(a.checks, g)
		}
	}
	clear(t.queue[len(rest):])
	t.queue = rest
	if len(batch) == 0 {
		// A quiet worker still makes a round trip at least every quiet(),
		// to learn of pauses, lowered limits and losses.
		sleep = min(sleep, t.quiet())
		if a.probe != "" && now.Sub(t.lastRound) >= t.quiet() {
			a.exact = true
		}
	}
	if a.exact && (len(batch) > 0 || (len(rest) > 0 && sleep == 0) || a.probe != "") {
		// A round near the limit claims at most a fair share: learning more
		// upcoming slots than that only costs Redis time.
		k := t.fairShare()
		if len(rest) > 0 {
			k = max(k, rest[0].n)
		}
		a.slots = min(slices.Min(a.lims), k)
	}
	return a, batch, claims, sleep
}

// upkeptLocked notes the upkeep a round trip planned at now carried, once
// it succeeded.
func (t *Throttler) upkeptLocked(a *attempt, now time.Time) {
	if a.trim {
		t.lastTrim = now
	}
	if a.clock {
		t.lastClock = now
	}
	if a.expire {
		t.lastExpire = now
	}
	if a.pause >= t.healPause {
		t.healPause = 0 // written
	}
}

// Upkeep that need not ride on every round trip.
const (
	// Trims of expired members ride along at most this often, or every
	// twentieth of the shortest window if longer (see trimEvery).
	minTrimEvery = 100 * time.Millisecond
	// A local clock without monotonic readings is sampled every round
	// trip instead (see clockSync).
	clockEvery = 250 * time.Millisecond
	// The key's TTL outlives its newest member by 2s (see ttl), so a
	// refresh a second late still keeps every member that counts.
	expireEvery = time.Second
)

// trimEvery is how often a process trims what stopped counting: every
// 100ms, or every twentieth of the shortest window if longer. Counts and
// slot lookups read only a window's neighbourhood, so members past it cost
// memory, not correctness: a set holds at most a twentieth of a window of
// them more than a trim on every round trip would leave, and an hour-long
// window's process, probing every 36s, sends two ZREMRANGEBYSCORE per key
// every 3 minutes instead of with every probe.
func (t *Throttler) trimEvery() time.Duration {
	w := t.wins[0].w
	for _, x := range t.wins[1:] {
		w = min(w, x.w)
	}
	return max(minTrimEvery, time.Duration(w)*time.Microsecond/20)
}

// quiet is the longest a worker with waiters goes without a round trip,
// and so the longest a shared pause, a lowered limit or a lost window goes
// unnoticed by a process with callers waiting: maxQuiet, or a hundredth of
// the first limit's window if longer. Safety does not rest on it (a heal
// pause covers every call the lost window held, and a waiter learns of a
// pause when it reserves); it only bounds how stale Stats and the known
// free slots get, and on an hour-long window a round trip every 500ms per
// process would cost far more than it tells.
func (t *Throttler) quiet() time.Duration {
	return max(maxQuiet, time.Duration(t.w)*time.Microsecond/100)
}

const maxQuiet = 500 * time.Millisecond

// jitter spreads the wake-ups of processes waiting for slots to come within
// reach. A slot becomes reservable reserve-ahead before its time, so waking
// up to a quarter of reserve-ahead later loses nothing: the slot is still
// reserved well before it is due, and by then several have come within
// reach, to be taken in one round trip. Processes waking at random points
// of that span take turns instead of all racing for each slot.
func (t *Throttler) jitter() time.Duration {
	spacing := time.Duration(t.w) * time.Microsecond / time.Duration(t.limit)
	spread := max(min(t.opt.ahead/4, 250*time.Millisecond), min(spacing, 10*time.Millisecond))
	return rand.N(spread + 1)
}

// resolveLocked applies a reply: claims that fit are admitted, the others go
// back to the head of the queue and their members are given back with the
// next round trip.
func (t *Throttler) resolveLocked(a *attempt, r reply, batch []*waiter, claims []claim) (admitted int) {
	t.learnMetaLocked(r)
	arrived := t.clock.server(t.now()) // the reply is in: the server's now
	lims := t.limitsLocked(arrived, t.scratch.lims[:0])
	t.scratch.lims = lims
	ok := t.decide(a, lims, r, claims, t.scratch.ok[:0])
	t.scratch.ok = ok
	for i, c := range claims {
		// A pause another process set while this attempt was on its way.
		if c.score < t.pausedTill {
			ok[i] = false
		}
	}
	now := t.now()
	if r.stepped {
		// Scored with an estimate of the server's clock that a clock step
		// made wrong: their counts prove nothing. Reserve again.
		clear(ok)
	}
	if t.noticeLossLocked(a, r, now) {
		// The counts undercount every process's recent calls: trust none.
		clear(ok)
	}
	if len(claims) > 0 {
		// A round that claimed nothing says nothing about room.
		t.near = slices.Contains(ok, false)
		for wi, counts := range r.counts {
			for _, c := range counts {
				t.near = t.near || c+int64(t.batchUnits()) > int64(lims[wi])
			}
		}
	}

	var dropped []entry
	var requeue []*waiter
	for i, w := range batch {
		if w.cancelled || !ok[i] {
			for _, m := range w.members {
				dropped = append(dropped, entry{score: claims[i].score, member: m})
			}
		}
		switch {
		case w.cancelled:
			// The caller is leaving: it removes its members itself unless
			// it has already gone.
			w.state = stFailed
			if w.gone {
				t.giveBack = append(t.giveBack, w.members...)
				w.members = nil
			}
			w.signal()
		case ok[i]:
			admitted++
			w.stale = nil
			w.state, w.at = stAdmitted, t.clock.local(claims[i].score)
			w.epoch = t.limitEpoch
			// Scored for when the reply arrives, which is now: a timer for
			// the microseconds left would only add its own latency. Unless
			// the reply came back much sooner than the round trip it was
			// planned with (an estimate taken during a stall): then the
			// call would go early by the difference (seed 803: a second
			// early). Early by up to half the buffer, as late by up to half
			// (see await), keeps two calls a limit apart an interval apart.
			w.immediate = claims[i].score <= a.soonest &&
				claims[i].score <= arrived+t.opt.buffer.Microseconds()/2
			t.journal.add(claims[i].score, w.members)
			if t.onAdmit != nil {
				t.onAdmit(claims[i].score, w.members)
			}
			w.signal()
		default:
			t.giveBack = append(t.giveBack, w.members...)
			t.dropLocalLocked(w)
			w.stale, w.members = w.members, nil
			w.state = stQueued
			requeue = append(requeue, w)
		}
	}
	if len(requeue) > 0 {
		t.queue = append(requeue, t.queue...)
	}
	if a.slots > 0 {
		t.slots = t.upcoming(a, r, dropped, len(a.adds))
	}
	t.recovered()
	if t.onResolved != nil {
		t.onResolved(len(requeue))
	}
	return admitted
}

// fairShare is how many slots a round near the limit may take: about a
// sixteenth of the limit, so that the first process to wake does not reserve a
// whole window ahead of the others, which wake at random points of the
// jitter span and take their own shares.
func (t *Throttler) fairShare() int {
	return max(1, min(t.batchUnits(), (t.limit+15)/16))
}

// sharePause is how long a worker waits after taking a full share: random,
// with a mean of 90% of the time the window takes to free a share's worth of
// slots (w*share/limit) when it frees them evenly; but short enough for one
// process to reserve a whole limit's worth of slots, share by share, within
// half of reserve-ahead. A window frees slots in the pattern it filled them
// in, often a burst (a limit's worth at once, a window after a burst of
// admissions): a longer pause lets the burst's slots come due before anyone
// reserved them, and each slot taken late stays late in every later window.
// (The simulation's calm seeds 8 and 64 used 96-98% of the quota with the
// uncapped pause: a third of each burst taken 50-270ms late.)
func (t *Throttler) sharePause() time.Duration {
	share := float64(t.fairShare()) / float64(t.limit)
	mean := 0.9 * float64(t.w) * float64(time.Microsecond) * share
	return rand.N(min(time.Duration(2*mean), time.Duration(float64(t.opt.ahead)*share)) + 1)
}
