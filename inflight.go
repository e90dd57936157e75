package throttler

import (
	"context"
	"slices"
	"time"
)

// WithInFlight caps the calls in flight at once at n, across every process
// sharing key, besides the rate: a call holds a place from its admission
// until it ends. Only calls whose end the Throttler sees take a place: Do,
// DoCost, Wrap, WrapCost, a Transport's requests, and Reserve's permits
// (until Permit.Done or Permit.Settle). WaitN and AllowN cannot tell when
// their call ends, and take none.
//
// The places are leases in a sorted set at key (which must share the first
// key's Redis Cluster slot), scored by when each expires on the server's
// clock. A call takes its place in the same round trip that reserves its
// rate slot, atomically (a short Lua script: trim the expired leases, count
// the rest, add what fits), so at most n leases are ever live. A call that
// gets no place waits for one without polling: the process subscribes to
// the key's channel, every release publishes to it, and each message sends
// every waiting process's waiters back to reserve; a killed process's
// leases are waited out until they expire.
//
// ttl bounds what a killed process costs: a process renews the leases it
// holds every ttl/3, so a call may run as long as it needs, and a process
// that stops renewing (killed, or cut off from Redis for longer than 2ttl/3)
// loses its places at most ttl after its last renewal. Zero means 30s;
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
		o.inflight = &inflightOption{key: key, n: n, ttl: ttl}
		return nil
	}
}

const (
	defaultLeaseTTL = 30 * time.Second
	minLeaseTTL     = 3 * time.Second
)

type inflightOption struct {
	key string
	n   int
	ttl time.Duration
}

// leases is what a process knows of its places in flight, guarded by the
// Throttler's mu. A keeper goroutine runs while the process holds or wants
// places: it renews what is held, gives back what it is told, listens for
// releases while waiters are parked, and exits when none of that is left.
type leases struct {
	inflightOption

	held   map[string]struct{} // places this process holds: calls in flight, and waiters holding one for their slot
	parked []*waiter           // waiters refused a place, until a release or an expiry
	back   []string            // places to give back (the keeper does)
	active int                 // WaitN-like calls that want a place and have not returned

	heard    uint64    // releases heard on the channel
	ready    bool      // subscribed: every release from now on is heard
	earliest time.Time // local time the earliest live lease expires, as the last refusal read it
	keeper   bool      // a keeper goroutine runs
	kick     chan struct{}
}

func newLeases(o *inflightOption) *leases {
	return &leases{inflightOption: *o, held: map[string]struct{}{}, kick: make(chan struct{}, 1)}
}

// wanted reports whether the keeper has anything to do.
func (l *leases) wanted() bool {
	return l.active > 0 || len(l.held) > 0 || len(l.back) > 0 || len(l.parked) > 0
}

func (l *leases) nudge() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// giveBackLocked gives a place back (the keeper sends it).
func (t *Throttler) giveLeaseBackLocked(id string) {
	if id == "" {
		return
	}
	delete(t.lease.held, id)
	t.lease.back = append(t.lease.back, id)
	t.startKeeperLocked()
	t.lease.nudge()
}

// startKeeperLocked starts the keeper when it has something to do and
// none runs.
func (t *Throttler) startKeeperLocked() {
	if l := t.lease; l != nil && !l.keeper && l.wanted() {
		l.keeper = true
		go t.keep()
	}
}

// grantLeasesLocked gives the batch's waiters the places the reply
// granted: the first ones asked for, in batch order.
func (t *Throttler) grantLeasesLocked(r reply, batch []*waiter) {
	if t.lease == nil {
		return
	}
	granted := r.leaseGranted
	for _, w := range batch {
		if w.leaseTry == "" {
			continue
		}
		if granted > 0 {
			granted--
			w.lease = w.leaseTry
			t.lease.held[w.lease] = struct{}{}
			t.startKeeperLocked()
		}
		w.leaseTry = ""
	}
	if r.leaseEarliest > 0 {
		t.lease.earliest = t.clock.local(r.leaseEarliest)
	}
}

// parkLocked parks w, refused a place, until a release or an expiry. A
// release heard since its round trip was planned, or a subscription that
// took since (releases before it went unheard), may have freed a place the
// round trip did not see: w then goes straight back to the queue instead
// (requeue). Waiters parked before the subscription takes try again when
// it does.
func (t *Throttler) parkLocked(w *waiter, a *attempt) (requeue bool) {
	l := t.lease
	t.stats.placeWaits.Add(1)
	if o := t.opt.observer.PlaceWait; o != nil {
		o()
	}
	if l.ready && (!a.leaseReady || l.heard != a.leaseHeard) {
		return true
	}
	l.parked = append(l.parked, w)
	t.startKeeperLocked()
	l.nudge()
	return false
}

// unparkLocked sends every parked waiter back to the head of the queue.
func (t *Throttler) unparkLocked() {
	l := t.lease
	if len(l.parked) == 0 {
		return
	}
	t.queue = append(l.parked, t.queue...)
	l.parked = nil
	if !t.running {
		t.running = true
		go t.work(0)
	} else {
		t.nudge()
	}
}

// keep is the keeper goroutine (see leases).
func (t *Throttler) keep() {
	l := t.lease
	renewEvery := l.ttl / 3
	nextRenew := t.now().Add(renewEvery)
	var watch *leaseWatch
	var subscribeAt time.Time // after a failed subscription: when to try again
	defer func() {
		if watch != nil {
			watch.close()
		}
	}()
	for {
		t.mu.Lock()
		if !l.wanted() {
			l.keeper, l.ready = false, false
			t.mu.Unlock()
			return
		}
		now := t.now()
		if len(l.parked) > 0 && !l.earliest.IsZero() && !now.Before(l.earliest) {
			// A lease expired (a killed process's, as far as this one
			// knows): its place is free for whoever asks first.
			l.earliest = time.Time{}
			t.unparkLocked()
		}
		back := l.back
		l.back = nil
		var renew []string
		if !now.Before(nextRenew) && len(l.held) > 0 {
			renew = make([]string, 0, len(l.held))
			for id := range l.held {
				renew = append(renew, id)
			}
			nextRenew = now.Add(renewEvery)
		}
		subscribe := watch == nil && len(l.parked) > 0 && !now.Before(subscribeAt)
		expiry := t.clock.server(now) + l.ttl.Microseconds()
		wake := nextRenew
		if !l.earliest.IsZero() && len(l.parked) > 0 {
			wake = minTime(wake, l.earliest)
		}
		if watch == nil && !subscribe && len(l.parked) > 0 {
			wake = minTime(wake, subscribeAt)
		}
		t.mu.Unlock()

		if len(back) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), t.opt.redisTimeout)
			if err := t.st.releaseLeases(ctx, back); err != nil {
				// Left to expire rather than retried without end.
				t.observeRedisError(err)
				t.mu.Lock()
				t.logRedis(err, "places in flight given back when their leases expire")
				t.mu.Unlock()
			}
			cancel()
		}
		if len(renew) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), t.opt.redisTimeout)
			if err := t.st.renewLeases(ctx, renew, expiry); err != nil {
				t.observeRedisError(err)
			}
			cancel()
		}
		if subscribe {
			watch = t.st.watchLeases()
		}
		var heard, ready, lost <-chan struct{}
		if watch != nil {
			heard, ready, lost = watch.heard, watch.ready, watch.done
		}
		timer := time.NewTimer(max(0, wake.Sub(t.now())))
		select {
		case <-l.kick:
		case <-timer.C:
		case <-ready:
			watch.ready = nil
			t.mu.Lock()
			// Waiters refused before the subscription took may have missed
			// a release: they try again.
			l.ready = true
			t.unparkLocked()
			t.mu.Unlock()
		case <-heard:
			t.mu.Lock()
			l.heard++
			t.unparkLocked()
			t.mu.Unlock()
		case <-lost:
			// The subscription failed (Redis went away): releases go
			// unheard until it is back, so the parked try again, and a
			// new subscription is made a second later.
			watch.close()
			watch = nil
			subscribeAt = t.now().Add(time.Second)
			t.mu.Lock()
			l.ready = false
			t.unparkLocked()
			t.mu.Unlock()
		}
		timer.Stop()
	}
}

// dropLeaseLocked takes w's place, or its attempt at one, off w and gives
// it back.
func (t *Throttler) dropLeaseLocked(w *waiter) {
	if t.lease == nil {
		return
	}
	t.giveLeaseBackLocked(w.lease)
	t.giveLeaseBackLocked(w.leaseTry)
	w.lease, w.leaseTry = "", ""
}

// unparkWaiterLocked removes w from the parked waiters.
func (t *Throttler) unparkWaiterLocked(w *waiter) {
	if t.lease != nil {
		t.lease.parked = slices.DeleteFunc(t.lease.parked, func(x *waiter) bool { return x == w })
	}
}

// InFlight reads from Redis how many places in flight are taken now, by
// every process sharing WithInFlight's key, and the cap. It returns an
// error wrapping ErrInvalidArgument when the Throttler has no WithInFlight,
// and one wrapping ErrRedis when Redis fails.
func (t *Throttler) InFlight(ctx context.Context) (taken, limit int, err error) {
	if t.lease == nil {
		return 0, 0, invalidf("InFlight: the Throttler was made without WithInFlight")
	}
	ctx, cancel := context.WithTimeout(ctx, t.opt.redisTimeout)
	defer cancel()
	n, err := t.st.liveLeases(ctx)
	if err != nil {
		t.observeRedisError(err)
		return 0, 0, redisError(err)
	}
	return n, t.lease.n, nil
}

// Done ends the permit's call: with WithInFlight, its place in flight goes
// back to every replica at once (one Redis round trip, bounded by the
// Redis timeout; a place Redis did not take back expires with its lease).
// Settle calls Done. Only the first call counts; Done is safe to call on
// any permit, with or without a place.
func (p *Permit) Done() {
	p.doneOnce.Do(func() {
		t := p.t
		if t.lease == nil || p.lease == "" {
			return
		}
		t.mu.Lock()
		delete(t.lease.held, p.lease)
		t.lease.nudge() // it may have nothing left to keep
		t.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), t.opt.redisTimeout)
		defer cancel()
		if err := t.st.releaseLeases(ctx, []string{p.lease}); err != nil {
			t.observeRedisError(err)
			t.mu.Lock()
			t.lease.back = append(t.lease.back, p.lease)
			t.startKeeperLocked()
			t.mu.Unlock()
		}
		t.observeInFlight(-1)
	})
}
