package throttler

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
)

// WithInFlight caps the calls in flight at once at n, across every process
// sharing key, besides the rate: a call holds a place from its admission
// until it ends. Only calls whose end the Throttler sees take a place: Do,
// DoCost, Wrap, WrapCost, a Transport's requests, and Acquire's permits
// (until Permit.Done or Permit.Settle). WaitN and AllowN cannot tell when
// their call ends, and take none.
//
// The places are leases in a sorted set at key (which must share the first
// key's Redis Cluster slot), scored by when each expires on the server's
// clock. A call takes its place in the same round trip that reserves its
// rate slot, atomically (a short Lua script: trim the expired leases, count
// the rest, add what fits), so at most n leases are ever live. A call that
// gets no place waits for one without polling: its process joins a line
// kept in Redis and subscribes to the key's channel, and each place given
// back wakes the process first in line, which sends one waiter back to
// reserve (processes take turns; a process woken with no waiter left
// passes the wake on). The places a process holds for calls queued for a
// slot go, each round, to the round's claims that lack one, in the order
// of the claims: a call the round claims a slot for does not give it back
// for want of a place that a call kept in the queue, or claimed for after
// it at a lower rank, holds idle. (A call admitted for a slot ahead keeps
// its place while it sleeps toward the slot.) A killed process's leases
// are waited out until they expire. A process that died in line leaves
// it, without taking a wake, once it has been silent for ttl; a wake lost
// with a process that died after it was woken is made up within ttl/3,
// when every process with waiters tries again.
//
// ttl bounds what a killed process costs: a process renews the leases it
// holds every ttl/3, so a call may run as long as it needs, and a process
// that stops renewing (killed, or cut off from Redis for longer than 2ttl/3)
// loses its places at most ttl after its last renewal. A waiter holding a
// place for its slot goes on it only while the place is known to be live:
// within ttl of when the last round trip that granted or renewed it was
// sent (a renewal that timed out may not have been applied), and not once
// a renewal found it gone; otherwise it gives it back and reserves again,
// with a new place, before it goes. So only a call that runs past its
// place's lapse may make more than n in flight: one running when its
// process is cut off, or one that went, its process already cut off,
// within the ttl of its place's last renewal known to have been applied.
// Zero means 30s;
// otherwise ttl must be at least 3s, and n at least 1.
//
// While Redis fails, FailOpen and FallbackLocal admit calls without a
// place: the cap holds only for calls Redis admitted.
func WithInFlight(key string, n int, ttl time.Duration) Option {
	return func(o *options) error {
		switch {
		case key == "":
			return invalidf("WithInFlight: empty key")
		case n < 1:
			return invalidf("WithInFlight(%q, %d): n must be at least 1", key, n)
		case ttl != 0 && ttl < minLeaseTTL:
			return invalidf("WithInFlight(%q, %d, %s): ttl must be at least %s", key, n, ttl, minLeaseTTL)
		}
		if ttl == 0 {
			ttl = defaultLeaseTTL
		}
		o.inflight = &core.InFlight{Key: key, N: n, TTL: ttl}
		return nil
	}
}

const (
	defaultLeaseTTL = 30 * time.Second
	minLeaseTTL     = 3 * time.Second
)

// leases is what a process knows of its places in flight, guarded by the
// Throttler's mu. A keeper goroutine runs while the process holds or wants
// places: it renews what is held, gives back what it is told, listens for
// wakes while waiters are parked, and exits when none of that is left.
type leases struct {
	core.InFlight

	// Places this process holds (calls in flight, and waiters holding
	// one for their slot), each with when it is known to lapse in Redis
	// no sooner, on the runtime's clock: the ttl after the last round trip
	// that granted or renewed it was sent (see live).
	held map[string]time.Time
	// Places of held that a renewal found Redis no longer holds (see
	// lost), until their call ends or, for a waiter that has not gone yet,
	// it reserves again with a new one (see lostPlace).
	gone   map[string]struct{}
	parked []*waiter // waiters refused a place, until a release or an expiry
	back   []string  // places to give back (the keeper does)
	active int       // WaitN-like calls that want a place and have not returned

	wakes uint64 // wakes for this process heard on the channel
	pass  int    // wakes heard with no waiter parked: to pass on to the next process
	ready bool   // subscribed: every wake from now on is heard
	// The process is in the line, as far as it knows: a refusal, or a
	// round that kept it there, put it in; a wake took it out.
	inLine bool
	// When the earliest live lease expires (server µs), as the last round
	// trip read it, and the last such expiry the parked were sent back
	// for: a lease still there after that was renewed, or the estimate
	// of the server's clock is off, and sending them back again for it
	// would only spin.
	earliest, expiredFor int64
	keeper               bool   // a keeper goroutine runs
	spawn                func() // starts one
	kick                 chan struct{}
}

// newLeases returns the places of o, whose keeper spawn starts.
func newLeases(o *core.InFlight, spawn func()) *leases {
	return &leases{InFlight: *o, held: map[string]time.Time{}, kick: make(chan struct{}, 1), spawn: spawn}
}

// wanted reports whether the keeper has anything to do.
func (l *leases) wanted() bool {
	return l.active > 0 || len(l.held) > 0 || len(l.back) > 0 || len(l.parked) > 0 || l.pass > 0
}

// nudge wakes the keeper for a turn.
func (l *leases) nudge() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// giveBack gives a place back (the keeper sends it).
func (l *leases) giveBack(id string) {
	if id == "" {
		return
	}
	delete(l.held, id)
	delete(l.gone, id)
	l.back = append(l.back, id)
	l.startKeeper()
	l.nudge()
}

// startKeeper starts the keeper when it has something to do and none
// runs.
func (l *leases) startKeeper() {
	if l != nil && !l.keeper && l.wanted() {
		l.keeper = true
		l.spawn()
	}
}

// ask adds to a the ask for a place in flight of w, a claim of the round,
// when it needs one, named from ids, with what the process knows of its
// wakes as the round is planned (see park).
func (l *leases) ask(a *core.Attempt, w *waiter, ids *memberSource) {
	// A call queued again (late, or after a pause) whose place lapsed
	// asks for a new one with its claim, rather than at its slot.
	l.lostPlace(w)
	if !w.needsPlaceLocked() {
		return
	}
	w.leaseTry = ids.next()
	a.Places.IDs = append(a.Places.IDs, w.leaseTry)
	a.Places.Wakes, a.Places.Ready, a.Places.Stay = l.wakes, l.ready, len(l.parked) > 0
	a.Places.At = time.Now()
}

// handOver gives the places held by waiters of queue (those the plan
// kept: refused their slot, or gone back for a new one) and of batch to
// the round's claims, batch, that need one, in batch order: first the
// queued waiters' places, from the back of the queue, whatever their
// rank (they claim nothing this round); then those of claims of batch
// that the taker goes before (see waiter.before), the last first. A place
// held by a waiter the rounds keep behind others would keep it from them:
// with places all taken, calls of a higher priority claim the slots it
// waits for, lack a place and give their slots back, round after round,
// while it waits behind them (simulation seed 53268, a hang). A waiter
// that gave its place asks for a new one with its next claim (in this
// round, for a claim of batch). A claim whose place lapsed (see lost)
// needs one too. Waiters asleep toward a slot they were admitted for keep
// theirs.
func (l *leases) handOver(queue, batch []*waiter) {
	if len(l.held) == 0 {
		return
	}
	for _, w := range batch {
		l.lostPlace(w)
	}
	if !slices.ContainsFunc(batch, (*waiter).needsPlaceLocked) {
		return
	}
	holds := func(w *waiter) bool { return w.lease != "" && l.live(w.lease) }
	q := len(queue) - 1
	for _, w := range batch {
		if !w.needsPlaceLocked() {
			continue
		}
		var from *waiter
		for ; from == nil && q >= 0; q-- {
			if holds(queue[q]) {
				from = queue[q]
			}
		}
		for k := len(batch) - 1; from == nil && k >= 0; k-- {
			if x := batch[k]; holds(x) && w.before(x) {
				from = x
			}
		}
		if from != nil {
			w.lease, from.lease = from.lease, ""
		}
	}
}

// grant gives the batch's waiters the places reply r to a granted: the
// first ones asked for, in batch order. Without WithInFlight (l nil) it
// does nothing.
func (l *leases) grant(a *core.Attempt, r core.Reply, batch []*waiter) {
	if l == nil {
		return
	}
	granted := r.LeaseGranted
	for _, w := range batch {
		if w.leaseTry == "" {
			continue
		}
		if granted > 0 {
			granted--
			w.lease = w.leaseTry
			l.held[w.lease] = a.Places.At.Add(l.TTL)
			l.startKeeper()
		}
		w.leaseTry = ""
	}
	if r.LeaseEarliest > 0 {
		l.earliest = r.LeaseEarliest
	}
	if len(a.Places.IDs) > 0 && (r.LeaseGranted < len(a.Places.IDs) || a.Places.Stay) {
		l.inLine = true // the script put this process in line
	}
}

// park parks w, refused a place by the round trip of attempt a, until this
// process is woken (see WithInFlight) or a lease expires. A wake heard
// since the round trip was planned, or a subscription that took since
// (wakes before it went unheard), may be for a place the round trip did
// not see: w then goes straight back to the queue instead (requeue).
// Waiters parked before the subscription takes try again when it does.
func (l *leases) park(w *waiter, a *core.Attempt) (requeue bool) {
	if l.ready && (!a.Places.Ready || l.wakes != a.Places.Wakes) {
		return true
	}
	l.parked = append(l.parked, w)
	l.startKeeper()
	l.nudge()
	return false
}

// parkBehind parks a call that wants a place when waiters of this process
// already wait for one and the process is in the line: it would be
// refused, and it would cost a round trip, and a second one to give back
// the slot it claimed with it. The wakes the line brings serve the parked
// in order. Not while Redis fails (degraded): the failure policy serves
// it. Without WithInFlight (l nil) it parks nothing.
func (l *leases) parkBehind(w *waiter, degraded bool) bool {
	if l == nil || !w.needsPlaceLocked() || !l.inLine || len(l.parked) == 0 || degraded {
		return false
	}
	l.parked = append(l.parked, w)
	return true
}

// began counts a wait that wants a place, until ended (see active).
func (l *leases) began() { l.active++ }

// released notes that the call holding place id ended: the keeper, which
// may have nothing left to keep, looks again.
func (l *leases) released(id string) {
	delete(l.held, id)
	delete(l.gone, id)
	l.nudge()
}

// renewed notes that a renewal of ids sent at sent succeeded: each of
// them still held and not lost (lost notes those) lives in Redis until
// at least the ttl after sent.
func (l *leases) renewed(ids []string, sent time.Time) {
	until := sent.Add(l.TTL)
	for _, id := range ids {
		if was, ok := l.held[id]; ok && until.After(was) {
			l.held[id] = until
		}
	}
}

// live reports whether place id is held and known to be live in Redis now:
// within the ttl of the last round trip that granted or renewed it. One
// whose renewals failed since may have lapsed (a renewal that timed out
// may or may not have been applied), and a call that went on it would be
// in flight on a place another process may take.
func (l *leases) live(id string) bool {
	until, ok := l.held[id]
	return ok && time.Now().Before(until)
}

// lost notes the places of ids that a renewal found Redis no longer
// holds (a process cut off from Redis for longer than 2ttl/3, or stalled
// as long): they are renewed no more, and a waiter holding one for its
// slot reserves again before it goes (see lostPlace). It reports how many
// were held: calls already in flight on them may make more than n.
func (l *leases) lost(ids []string) (n int) {
	for _, id := range ids {
		if _, ok := l.held[id]; !ok {
			continue
		}
		delete(l.held, id)
		if l.gone == nil {
			l.gone = map[string]struct{}{}
		}
		l.gone[id] = struct{}{}
		n++
	}
	return n
}

// lostPlace reports whether w holds a place that is not live (see live):
// one a renewal found Redis no longer holds (see lost), which it takes off
// w, or one not known to be live any more, which it takes off w and gives
// back (it may still be in Redis). w then needs a new one. Without
// WithInFlight (l nil) it reports false.
//
// A waiter whose process could not renew its place for a ttl went on it
// before: its renewals had timed out (their replies lost, one applied),
// the next found the place lapsed 3.3s after the call began, and three
// such calls made 8 in flight against a cap of 7 (simulation seed 63877).
func (l *leases) lostPlace(w *waiter) bool {
	if l == nil || w.lease == "" {
		return false
	}
	if _, ok := l.gone[w.lease]; ok {
		delete(l.gone, w.lease)
		w.lease = ""
		return true
	}
	if l.live(w.lease) {
		return false
	}
	l.giveBack(w.lease)
	w.lease = ""
	return true
}

// ended ends the wait of w, which wanted a place (see active), and
// reports whether w goes holding one. A w that does not go (ok false)
// gives its place back; a place its round trip in flight asks for is the
// worker's to give back, once it knows.
func (l *leases) ended(w *waiter, ok bool) (holds bool) {
	l.active--
	l.nudge()
	if !ok {
		l.giveBack(w.lease)
		w.lease = ""
	}
	return w.lease != ""
}

// drop takes w's place, or its attempt at one, off w and gives it back.
// Without WithInFlight (l nil) it does nothing.
func (l *leases) drop(w *waiter) {
	if l == nil {
		return
	}
	l.giveBack(w.lease)
	l.giveBack(w.leaseTry)
	w.lease, w.leaseTry = "", ""
}

// unpark removes w from the parked waiters. Without WithInFlight (l nil)
// it does nothing.
func (l *leases) unpark(w *waiter) {
	if l != nil {
		l.parked = slices.DeleteFunc(l.parked, func(x *waiter) bool { return x == w })
	}
}

// unparkLocked sends the first n parked waiters (all, for n < 0) back to
// the head of the queue.
func (k *keeper) unparkLocked(n int) {
	t, l := k.t, k.l
	if n < 0 || n > len(l.parked) {
		n = len(l.parked)
	}
	if n == 0 {
		return
	}
	t.worker.pushFront(slices.Clone(l.parked[:n]))
	l.parked = slices.Delete(l.parked, 0, n)
	if t.worker.running {
		t.worker.nudge()
	} else {
		t.worker.start(&t.owed)
	}
}

// runKeeper is the keeper goroutine (see leases).
func runKeeper(t *Throttler) {
	k := keeper{t: t, l: t.lease, nextRenew: time.Now().Add(t.lease.TTL / 3)}
	defer k.stopWatching()
	for {
		w, ok := k.plan()
		if !ok {
			return
		}
		if k.write(w) {
			// The client was closed: the process is shutting down, and
			// its leases expire on their own.
			t.mu.Lock()
			clear(k.l.held)
			k.l.back, k.l.pass = nil, 0
			k.unparkLocked(-1)
			t.mu.Unlock()
		}
		if w.subscribe {
			k.watch = t.st.WatchLeases()
		}
		if k.done() {
			return
		}
		k.wait(w.wake)
	}
}

// done reports whether the keeper has nothing left to do after its turn's
// writes, and if so marks it gone: it exits at once rather than at its next
// turn, up to a third of the ttl later.
func (k *keeper) done() bool {
	k.t.mu.Lock()
	defer k.t.mu.Unlock()
	return k.l.retire()
}

// retire marks the keeper gone when it has nothing left to do (see
// wanted), and reports whether it did.
func (l *leases) retire() bool {
	if l.wanted() {
		return false
	}
	l.keeper, l.ready = false, false
	return true
}

// keeper is the keeper goroutine's own state.
type keeper struct {
	t *Throttler
	l *leases
	// When the keeper renews next, on the runtime's clock: a local clock
	// stepped back would put the renewal off by the step, past the
	// leases' expiry (simulation seed 50717).
	nextRenew   time.Time
	watch       *redisstore.Subscription
	subscribeAt time.Time // after a failed subscription: when to try again
}

// keeperWork is what one turn of the keeper writes to Redis.
type keeperWork struct {
	back, renew []string
	pass        int // wakes to pass on
	subscribe   bool
	wake        time.Time // when the keeper looks again, unless woken
}

// plan decides, under the mutex, what the keeper's turn does; false means
// the keeper exits.
func (k *keeper) plan() (keeperWork, bool) {
	t, l := k.t, k.l
	t.mu.Lock()
	defer t.mu.Unlock()
	if l.retire() {
		return keeperWork{}, false
	}
	now := t.now()
	expires := l.earliest > l.expiredFor && len(l.parked) > 0
	if expires && !now.Before(t.clock.Local(l.earliest)) {
		// A lease expired (a killed process's, as far as this one
		// knows): its place went back without waking anyone.
		l.expiredFor, expires = l.earliest, false
		k.unparkLocked(-1)
	}
	w := keeperWork{back: l.back, pass: l.pass}
	l.back, l.pass = nil, 0
	rtNow := time.Now()
	if !rtNow.Before(k.nextRenew) {
		for id := range l.held {
			w.renew = append(w.renew, id)
		}
		k.nextRenew = rtNow.Add(l.TTL / 3)
		// A wake can be lost (the woken process died before it passed
		// it on): a waiter tries again at least this often.
		k.unparkLocked(1)
	}
	w.subscribe = k.watch == nil && len(l.parked) > 0 && !now.Before(k.subscribeAt)
	w.wake = now.Add(k.nextRenew.Sub(rtNow)) // the local clock's time for it
	if expires {
		w.wake = minTime(w.wake, t.clock.Local(l.earliest))
	}
	if k.watch == nil && !w.subscribe && len(l.parked) > 0 {
		w.wake = minTime(w.wake, k.subscribeAt)
	}
	return w, true
}

// wait waits for the next turn: a nudge, the next renewal, the time
// planned (local), or news from the subscription.
func (k *keeper) wait(until time.Time) {
	t, l := k.t, k.l
	var heard, ready, lost <-chan struct{}
	if k.watch != nil {
		heard, ready, lost = k.watch.Heard, k.watch.Ready, k.watch.Done
	}
	// The renewal is timed on the runtime's clock, the other wakes on the
	// local one: a local clock stepped back while the turn wrote would
	// put the renewal off by the step (see nextRenew).
	timer := time.NewTimer(max(0, min(k.nextRenew.Sub(time.Now()), until.Sub(t.now()))))
	defer timer.Stop()
	select {
	case <-l.kick:
	case <-timer.C:
	case <-ready:
		t.mu.Lock()
		// Waiters refused before the subscription took (or while
		// go-redis reconnected it) may have missed their wake: they try
		// again.
		l.ready = true
		k.unparkLocked(-1)
		t.mu.Unlock()
	case <-heard:
		n := len(k.watch.Take())
		t.mu.Lock()
		// One place each: as many waiters try as wakes came; wakes
		// nobody here waits for any more go on to the next process.
		l.wakes += uint64(n)
		l.inLine = false // a wake takes the process out of the line
		l.pass += max(0, n-len(l.parked))
		k.unparkLocked(n)
		t.mu.Unlock()
	case <-lost:
		// The subscription failed (Redis went away): wakes go unheard
		// until it is back, so the parked try again, and a new
		// subscription is made a second later.
		k.stopWatching()
		k.subscribeAt = t.now().Add(time.Second)
		t.mu.Lock()
		l.ready = false
		k.unparkLocked(-1)
		t.mu.Unlock()
	}
}

func (k *keeper) stopWatching() {
	if k.watch != nil {
		k.watch.Close()
		k.watch = nil
	}
}

// write gives back places, passes wakes on and renews leases, the
// keeper's turn w. It reports whether the client was closed.
func (k *keeper) write(w keeperWork) (closed bool) {
	t := k.t
	write := func(f func(context.Context) error, then string) {
		ctx, cancel := context.WithTimeout(context.Background(), t.opt.redisTimeout)
		defer cancel()
		if err := f(ctx); err != nil {
			t.stats.redisError(err)
			closed = closed || redisstore.Closed(err)
			t.mu.Lock()
			t.stats.logRedis(t.now(), err, then)
			t.mu.Unlock()
		}
	}
	if len(w.back) > 0 || w.pass > 0 {
		// Left to expire if this fails, rather than retried without end.
		write(func(ctx context.Context) error { return t.st.ReleaseLeases(ctx, w.back, w.pass) },
			"places in flight given back when their leases expire")
	}
	if len(w.renew) > 0 {
		var lost []string
		sent, renewed := time.Now(), false
		write(func(ctx context.Context) (err error) {
			lost, err = t.st.RenewLeases(ctx, w.renew)
			renewed = err == nil
			return err
		}, "leases of calls in flight not renewed; retried in a third of their ttl")
		if renewed {
			t.mu.Lock()
			k.l.renewed(w.renew, sent)
			n := k.l.lost(lost)
			t.mu.Unlock()
			if n > 0 {
				t.opt.logger.Warn("throttler: places in flight lapsed in Redis while this process held them; waiters holding one reserve again, calls already in flight on them may exceed the cap",
					slog.Int("places", n))
			}
		}
	}
	return closed
}

// InFlight reads from Redis how many places in flight are taken now, by
// every process sharing WithInFlight's key, and the cap. It returns an
// error wrapping ErrInvalidArgument when the Throttler has no WithInFlight,
// and one wrapping ErrRedis when Redis fails.
func (t *Throttler) InFlight(ctx context.Context) (taken, limit int, err error) {
	if err := usable(t, ctx, "InFlight"); err != nil {
		return 0, 0, err
	}
	if t.lease == nil {
		return 0, 0, invalidf("InFlight: the Throttler was made without WithInFlight")
	}
	ctx, cancel := context.WithTimeout(ctx, t.opt.redisTimeout)
	defer cancel()
	n, err := t.st.LiveLeases(ctx)
	if err != nil {
		t.stats.redisError(err)
		return 0, 0, redisError(err)
	}
	return n, t.lease.N, nil
}

// inFlightRider gives each call that wants one a place in flight
// (WithInFlight): it asks for places for the round's batch, takes those the
// reply granted, and holds aside the calls that got a slot but no place.
// Without WithInFlight (t.lease nil) no call wants one.
type inFlightRider struct{ noRider }

func (inFlightRider) claim(t *Throttler, rd *round) {
	if t.lease == nil {
		return
	}
	t.lease.handOver(t.worker.queue, rd.batch)
	for _, w := range rd.batch {
		t.lease.ask(rd.Attempt, w, t.ids)
	}
}

func (inFlightRider) read(t *Throttler, rd *round, _ *replyRead) {
	t.lease.grant(rd.Attempt, rd.Reply, rd.batch)
}

// enter parks a call behind those already waiting for a place (see
// leases.parkBehind).
func (inFlightRider) enter(t *Throttler, w *waiter) bool {
	if !t.lease.parkBehind(w, t.fallback.isDegraded()) {
		return false
	}
	t.stats.placeWait()
	return true
}

func (inFlightRider) lacks(w *waiter) bool { return w.needsPlaceLocked() }

func (inFlightRider) aside(t *Throttler, w *waiter, a *core.Attempt) bool {
	t.stats.placeWait()
	return t.lease.park(w, a)
}

func (inFlightRider) drop(t *Throttler, w *waiter) { t.lease.drop(w) }
