package throttler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// concurrency tracks how many calls run at once, and the most seen.
type concurrency struct {
	now, most atomic.Int64
}

func (c *concurrency) enter() {
	n := c.now.Add(1)
	for {
		m := c.most.Load()
		if n <= m || c.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (c *concurrency) leave() { c.now.Add(-1) }

// waitKeeperIdle waits until th's lease keeper has exited: once it has
// given back the last place, within a round trip, not at its next turn (a
// third of the ttl, 10s by default, later).
func waitKeeperIdle(t *testing.T, th *Throttler) {
	t.Helper()
	waitLocked(t, th, 2*time.Second, "lease keeper still running 2s after the last call ended", func() bool { return !th.lease.keeper })
}

// Three replicas capped at 3 calls in flight: never more than 3 run at
// once, every call runs, callers found the cap full and waited, and every
// place goes back.
func TestInFlightCap(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		places := "{" + key + "}:inflight"
		var ths []*Throttler
		for range 3 {
			ths = append(ths, mustNew(t, dial(), "{"+key+"}:rate", 1000, time.Second,
				WithLogger(quiet), WithInFlight(places, 3, 0)))
		}
		var c concurrency
		var calls atomic.Int64
		var wg sync.WaitGroup
		for i := range 24 {
			th := ths[i%3]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					err := th.Do(context.Background(), func(context.Context) error {
						c.enter()
						defer c.leave()
						calls.Add(1)
						time.Sleep(2 * time.Millisecond)
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if m := c.most.Load(); m > 3 {
			t.Fatalf("%d calls ran at once, cap 3", m)
		}
		if n := calls.Load(); n != 96 {
			t.Fatalf("%d calls ran, want 96", n)
		}
		waits := uint64(0)
		for _, th := range ths {
			waitKeeperIdle(t, th)
			waitIdle(t, th)
			waits += th.Stats().Places.Waits
			if s := th.Stats(); s.Places.InFlight != 0 {
				t.Fatalf("Stats.Places.InFlight %d after every call ended", s.Places.InFlight)
			}
		}
		if waits == 0 {
			t.Fatal("no call waited for a place: the test did not fill the cap")
		}
		if n := len(keyMembers(t, dial(), places)); n != 0 {
			t.Fatalf("%d places still taken after every call ended", n)
		}
	})
}

// Rate and place are decided in one round trip.
func TestInFlightOneRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		th := mustNew(t, dial(), "{"+key+"}:rate", 10, time.Second, WithLogger(quiet), WithInFlight("{"+key+"}:inflight", 2, 0))
		if err := th.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if s := th.Stats(); s.Redis.RoundTrips != 1 {
			t.Fatalf("one uncontended Do took %d reservation round trips, want 1", s.Redis.RoundTrips)
		}
		waitKeeperIdle(t, th)
	})
}

// A killed process's places come back when its leases expire, not before.
func TestInFlightKilledProcessLeasesExpire(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		places := "{" + key + "}:inflight"
		// What a process killed mid-call leaves: two live leases, renewed
		// last a moment ago, that nobody will renew or give back.
		expiry := serverMicros(t, c) + (1500 * time.Millisecond).Microseconds()
		if err := c.ZAdd(context.Background(), places, redis.Z{Score: float64(expiry), Member: "dead1"},
			redis.Z{Score: float64(expiry), Member: "dead2"}).Err(); err != nil {
			t.Fatal(err)
		}
		th := mustNew(t, dial(), "{"+key+"}:rate", 10, time.Second, WithLogger(quiet), WithInFlight(places, 2, 0))
		var at int64
		err := th.Do(context.Background(), func(context.Context) error {
			at = serverMicros(t, c)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if at < expiry {
			t.Fatalf("a call ran %s before the dead process's leases expired", time.Duration(expiry-at)*time.Microsecond)
		}
		waitKeeperIdle(t, th)
	})
}

// A caller waiting for a place leaves promptly when its context ends, and
// takes nothing with it.
func TestInFlightCancelWhileWaiting(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		places := "{" + key + "}:inflight"
		th := mustNew(t, dial(), "{"+key+"}:rate", 100, time.Second, WithLogger(quiet), WithInFlight(places, 1, 0))
		p, err := th.Acquire(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- th.Do(ctx, func(context.Context) error { return errors.New("ran") }) }()
		for th.Stats().Places.Waits == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Do: %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Do did not return after its context was cancelled")
		}
		if n := len(keyMembers(t, dial(), places)); n != 1 {
			t.Fatalf("%d places taken, want 1 (the permit's)", n)
		}
		p.Done()
		p.Done()
		waitKeeperIdle(t, th)
		waitIdle(t, th)
		if n := len(keyMembers(t, dial(), places)); n != 0 {
			t.Fatalf("%d places taken after Done, want 0", n)
		}
	})
}

// A place is held while the response body is read, and goes back when it
// is closed, or when the round trip fails.
func TestInFlightTransport(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		places := "{" + key + "}:inflight"
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, strings.Repeat("x", 100))
		}))
		defer api.Close()
		th := mustNew(t, dial(), "{"+key+"}:rate", 100, time.Second, WithLogger(quiet), WithInFlight(places, 1, 0))
		client := &http.Client{Transport: th.RoundTripper(nil)}
		resp, err := client.Get(api.URL)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(keyMembers(t, dial(), places)); n != 1 {
			t.Fatalf("%d places taken while the body is unread, want 1", n)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n := len(keyMembers(t, dial(), places)); n != 0 {
			t.Fatalf("%d places taken after the body was closed, want 0", n)
		}
		// A round trip that fails gives its place back.
		if _, err := client.Get("http://127.0.0.1:1/"); err == nil {
			t.Fatal("a request to a closed port succeeded")
		}
		if n := len(keyMembers(t, dial(), places)); n != 0 {
			t.Fatalf("%d places taken after a failed round trip, want 0", n)
		}
		waitKeeperIdle(t, th)
		client.CloseIdleConnections()
	})
}

func TestWithInFlightRejectsBadInput(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		key string
		opt Option
	}{
		{"{a}:rate", WithInFlight("", 1, 0)},
		{"{a}:rate", WithInFlight("{a}:f", 0, 0)},
		{"{a}:rate", WithInFlight("{a}:f", 1, time.Second)},
		{"{a}:rate", WithInFlight("{b}:f", 1, 0)},
		{"{a}:rate", WithInFlight("{a}:rate", 1, 0)},
	} {
		_, err := New(c, tc.key, 10, time.Second, tc.opt)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: New: %v, want ErrInvalidArgument", fmt.Sprint(tc.opt != nil), err)
		}
	}
}

// A call may run longer than the lease's ttl: its process renews the
// lease every ttl/3.
func TestInFlightRenewsLongCalls(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		places := "{" + key + "}:inflight"
		th := mustNew(t, dial(), "{"+key+"}:rate", 10, time.Second, WithLogger(quiet), WithInFlight(places, 1, 3*time.Second))
		p, err := th.Acquire(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		before := keyMembers(t, dial(), places)[p.lease]
		time.Sleep(1500 * time.Millisecond) // past the first renewal, at ttl/3
		after, ok := keyMembers(t, dial(), places)[p.lease]
		if !ok || after <= before {
			t.Fatalf("lease expiry %d, then %d (present %v): not renewed", before, after, ok)
		}
		p.Done()
		waitKeeperIdle(t, th)
	})
}

// A release wakes one waiting process, the first in line, not every one:
// while the woken process's call runs, the other waiting process has made
// no round trip since it parked. Then the other gets its turn.
func TestInFlightReleaseWakesOneProcess(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		places := "{" + key + "}:inflight"
		newTh := func() *Throttler {
			return mustNew(t, dial(), "{"+key+"}:rate", 100, time.Second, WithLogger(quiet), WithInFlight(places, 1, 0))
		}
		holder, first, second := newTh(), newTh(), newTh()
		p, err := holder.Acquire(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		parked := func(th *Throttler) {
			t.Helper()
			waitLocked(t, th, 5*time.Second, "the waiter did not park", func() bool {
				return len(th.lease.parked) == 1 && th.lease.ready
			})
		}
		inFirst, release := make(chan uint64), make(chan struct{})
		done := make(chan error, 2)
		go func() {
			done <- first.Do(context.Background(), func(context.Context) error {
				inFirst <- second.Stats().Redis.RoundTrips
				<-release
				return nil
			})
		}()
		parked(first)
		go func() { done <- second.Do(context.Background(), func(context.Context) error { return nil }) }()
		parked(second)
		waitIdle(t, second) // its refused slot given back: nothing left to send
		before := second.Stats().Redis.RoundTrips
		p.Done()
		if during := <-inFirst; during != before {
			t.Fatalf("the second process made %d round trips while the first in line took the place", during-before)
		}
		close(release)
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		for _, th := range []*Throttler{holder, first, second} {
			waitKeeperIdle(t, th)
			waitIdle(t, th)
		}
	})
}

// TestLeaseGrantSurvivesAResend: the lease script run twice for one
// attempt (the client sends a pipeline again after a read that timed out)
// grants the same places the second time, instead of refusing the place
// the first run took and leaving it taken until its lease expires.
func TestLeaseGrantSurvivesAResend(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		places := "{" + key + "}:places"
		run := func() int64 {
			// ttl 1s, cap 1, keys kept 5s, process "p", no waiters left; ids.
			v, err := redisstore.LeaseScript.Run(context.Background(), c, []string{places, redisstore.LineKey(places), redisstore.SeenKey(places)},
				1_000_000, 1, 5000, "p", "0", "id-1").Slice()
			if err != nil {
				t.Fatal(err)
			}
			return v[0].(int64)
		}
		if got := run(); got != 1 {
			t.Fatalf("first run granted %d, want 1", got)
		}
		if got := run(); got != 1 {
			t.Fatalf("the same attempt run again granted %d, want the place it already holds", got)
		}
		if n, _ := c.ZCard(context.Background(), places).Result(); n != 1 {
			t.Fatalf("%d places taken, want 1", n)
		}
	})
}

// TestReleaseSkipsSilentProcesses: a release wakes the first process in
// line that asked for a place within the staleness given, and takes the
// silent ones ahead of it (killed while in line) out without a wake, which
// they would lose.
func TestReleaseSkipsSilentProcesses(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		c := dial()
		places := "{" + key + "}:places"
		keys := []string{places, redisstore.LineKey(places), redisstore.SeenKey(places)}
		ask := func(proc, id string) int64 {
			// ttl 60s, cap 1, keys kept 120s, no waiters left.
			v, err := redisstore.LeaseScript.Run(ctx, c, keys, 60_000_000, 1, 120_000, proc, "0", id).Slice()
			if err != nil {
				t.Fatal(err)
			}
			return v[0].(int64)
		}
		if ask("holder", "lease-1") != 1 {
			t.Fatal("the first ask was refused an empty cap")
		}
		if ask("dead", "lease-2") != 0 || ask("live", "lease-3") != 0 {
			t.Fatal("a full cap granted a place")
		}
		if n, _ := c.ZCard(ctx, redisstore.SeenKey(places)).Result(); n != 2 {
			t.Fatalf("%d processes marked seen, want the 2 in line", n)
		}
		// "dead" was last seen long ago: it was killed while in line.
		c.ZAdd(ctx, redisstore.SeenKey(places), redis.Z{Score: 0, Member: "dead"})
		sub := c.Subscribe(ctx, places)
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		woken, err := redisstore.ReleaseScript.Run(ctx, c, keys, 0, 60_000_000, "lease-1").Int()
		if err != nil || woken != 1 {
			t.Fatalf("release woke %d (%v), want 1", woken, err)
		}
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil || msg.Payload != "live" {
			t.Fatalf("release woke %v (%v), want the live process behind the silent one", msg, err)
		}
		if n, _ := c.Exists(ctx, redisstore.LineKey(places), redisstore.SeenKey(places)).Result(); n != 0 {
			t.Fatalf("line or seen still there after both left it (%d keys)", n)
		}
	})
}

// A local clock stepped back by more than the ttl while a process holds a
// place must not lose the place: the keeper renews every third of the ttl
// on the runtime's clock, and the server's clock sets the renewed expiry
// (simulation seed 50717, where a replica stepped 7.9s back renewed a
// place it held for its slot 9s late, then to an expiry 7.9s short, which
// Redis ignored; the lease lapsed, another process took the place, and the
// replica's call later went on the place it still believed it held: three
// calls in flight against a cap of two).
func TestInFlightRenewalSurvivesClockStepBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		places := "{" + key + "}:inflight"
		const ttl = 3 * time.Second
		var step atomic.Int64
		local := func() time.Time { return time.Now().Add(time.Duration(step.Load())) }
		th := mustNew(t, dial(), "{"+key+"}:rate", 10, time.Second, WithLogger(quiet), WithClock(local), WithInFlight(places, 1, ttl))
		p, err := th.Acquire(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		// The keeper renews next a third of the ttl from its first turn;
		// the step comes before that renewal. No round trip follows that
		// would show the step to the estimate of the server's clock.
		time.Sleep(ttl / 6)
		step.Store(int64(-(ttl + 2*time.Second)))
		time.Sleep(ttl + ttl/3) // past the lease's expiry, unless renewed

		c := dial()
		expiry, ok := keyMembers(t, c, places)[p.lease]
		if now := serverMicros(t, c); !ok || expiry <= now {
			t.Errorf("the place held across a step back of %s: present %v, expiry %dµs from now; want renewed",
				-time.Duration(step.Load()), ok, expiry-now)
		}
		other := mustNew(t, dial(), "{"+key+"}:rate", 10, time.Second, WithLogger(quiet), WithInFlight(places, 1, ttl))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if q, err := other.Acquire(ctx, 1); err == nil {
			q.Done()
			t.Errorf("another process took the only place while the first still held it")
		}
		p.Done()
		waitKeeperIdle(t, th)
		waitKeeperIdle(t, other)
	})
}

// The same step back, when it comes while the keeper writes a renewal:
// the keeper worked the timer for its next renewal out on the local clock
// after the write, so that renewal came the step late, past the lease's
// expiry. The first renewal (a third of the ttl on) steps the clock back
// as it goes to Redis.
func TestInFlightRenewalSurvivesClockStepBackDuringItsWrite(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		places := "{" + key + "}:inflight"
		const ttl = 3 * time.Second // the least WithInFlight takes
		var step atomic.Int64
		local := func() time.Time { return time.Now().Add(time.Duration(step.Load())) }
		c := dial()
		c.AddHook(onRenew{places: places, do: func() { step.CompareAndSwap(0, int64(-(ttl + 2*time.Second))) }})
		th := mustNew(t, c, "{"+key+"}:rate", 10, time.Second, WithLogger(quiet), WithClock(local), WithInFlight(places, 1, ttl))
		p, err := th.Acquire(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl + ttl/2) // past the expiry the first renewal set, unless renewed since
		if step.Load() == 0 {
			t.Fatal("no renewal was written")
		}
		c2 := dial()
		expiry, ok := keyMembers(t, c2, places)[p.lease]
		if now := serverMicros(t, c2); !ok || expiry <= now {
			t.Errorf("the place held across a step back of %s during a renewal: present %v, expiry %dµs from now; want renewed",
				-time.Duration(step.Load()), ok, expiry-now)
		}
		p.Done()
		waitKeeperIdle(t, th)
	})
}

// onRenew is a go-redis hook that calls do as a renewal of the leases at
// places (the only script run on that key alone) goes to Redis.
type onRenew struct {
	places string
	do     func()
}

func (h onRenew) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h onRenew) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(a) > 3 && fmt.Sprint(a[2]) == "1" && a[3] == h.places {
			h.do()
		}
		return next(ctx, cmd)
	}
}

func (h onRenew) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A place that lapsed in Redis while this process held it for a waiter's
// slot (a process cut off from Redis, or stalled, for longer than 2ttl/3)
// is found by the next renewal, whose script says which places it no
// longer holds: the waiter reserves again before it goes, with a new
// place, instead of going on the one Redis gave to another process
// meanwhile.
func TestInFlightLapsedPlaceIsTakenAgain(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		c := dial()
		places := "{" + key + "}:inflight"
		const ttl = 3 * time.Second
		th := mustNew(t, dial(), "{"+key+"}:rate", 1, 2*time.Second, WithLogger(quiet), WithReserveAhead(3*time.Second), WithInFlight(places, 2, ttl))
		if err := th.Do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		// The second call's slot is a window ahead: it holds a place
		// until then.
		ran := make(chan time.Time, 1)
		done := make(chan error, 1)
		go func() {
			done <- th.Do(ctx, func(context.Context) error {
				ran <- time.Now()
				return nil
			})
		}()
		var lease string
		deadline := time.Now().Add(time.Second)
		for lease == "" && time.Now().Before(deadline) {
			if m := keyMembers(t, c, places); len(m) == 1 {
				for id := range m {
					lease = id
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		if lease == "" {
			t.Fatalf("no single place held for the waiting call: %v", keyMembers(t, c, places))
		}
		// The lease lapses, and another process takes both places.
		if err := c.ZRem(ctx, places, lease).Err(); err != nil {
			t.Fatal(err)
		}
		other := mustNew(t, dial(), "{"+key+"}:other", 100, time.Second, WithLogger(quiet), WithInFlight(places, 2, ttl))
		p1, err := other.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := other.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-ran:
			t.Fatalf("the waiting call ran at %s on a place Redis had given to another process: 3 in flight against 2", at.Format(time.StampMilli))
		case <-time.After(3 * time.Second): // past its slot
		}
		p1.Done()
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatal("the waiting call did not run within 5s of a place freed")
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		p2.Done()
		waitKeeperIdle(t, th)
		waitKeeperIdle(t, other)
	})
}

// A call queued again (late, or after a pause) while holding a place that
// a renewal found lapsed asks for a new place with its next claim: it no
// longer goes to its slot first, there to find the place gone and reserve
// once more.
func TestInFlightLapsedPlaceAskedAgainWithTheClaim(t *testing.T) {
	live := time.Now().Add(time.Hour)
	l := &leases{held: map[string]time.Time{"p1": live, "p2": live}}
	if n := l.lost([]string{"p1"}); n != 1 {
		t.Fatalf("lost: %d held, want 1", n)
	}
	lapsed, kept := &waiter{wantLease: true, lease: "p1"}, &waiter{wantLease: true, lease: "p2"}
	var a core.Attempt
	ids := newMemberSource()
	l.ask(&a, lapsed, ids)
	l.ask(&a, kept, ids)
	if len(a.Places.IDs) != 1 || lapsed.lease != "" || a.Places.IDs[0] != lapsed.leaseTry {
		t.Fatalf("places asked %v (the lapsed call's lease %q, try %q), want one new place for the lapsed call", a.Places.IDs, lapsed.lease, lapsed.leaseTry)
	}
	if kept.lease != "p2" || l.lostPlace(kept) {
		t.Fatalf("the call whose place holds lost it: lease %q", kept.lease)
	}
}

// A place whose process could not renew it for a ttl is not known to be
// live (a renewal that timed out may not have been applied): a waiter
// holding it for its slot gives it back and reserves again with a new
// one, no other claim is handed it, and a renewal that succeeds makes it
// live again (simulation seed 63877: three calls went on places that had
// lapsed, and made 8 in flight against a cap of 7).
func TestInFlightPlaceNotRenewedIsNotLive(t *testing.T) {
	now := time.Now()
	l := &leases{InFlight: core.InFlight{TTL: 3 * time.Second}, kick: make(chan struct{}, 1),
		held:  map[string]time.Time{"overdue": now.Add(-time.Millisecond), "sure": now.Add(time.Hour), "renewed": now.Add(-time.Millisecond)},
		spawn: func() {}}
	l.renewed([]string{"renewed", "gone"}, now)
	if !l.live("renewed") || l.live("gone") || l.live("overdue") || !l.live("sure") {
		t.Fatalf("live: renewed %v, gone %v, overdue %v, sure %v; want true, false, false, true",
			l.live("renewed"), l.live("gone"), l.live("overdue"), l.live("sure"))
	}
	claim := &waiter{wantLease: true, rank: rank{prio: PriorityHigh}}
	overdue := &waiter{wantLease: true, lease: "overdue", rank: rank{prio: PriorityLow}}
	l.handOver([]*waiter{overdue}, []*waiter{claim})
	if claim.lease != "" || overdue.lease != "overdue" {
		t.Fatalf("the claim holds %q and the queued waiter %q: a place not known to be live was handed over", claim.lease, overdue.lease)
	}
	if !l.lostPlace(overdue) || overdue.lease != "" {
		t.Fatalf("the waiter on the overdue place goes on it (lease %q)", overdue.lease)
	}
	if _, held := l.held["overdue"]; held || !slices.Equal(l.back, []string{"overdue"}) {
		t.Fatalf("the overdue place: held %v, given back %v; want given back (it may still be in Redis)", held, l.back)
	}
	sure := &waiter{wantLease: true, lease: "sure"}
	if l.lostPlace(sure) || sure.lease != "sure" {
		t.Fatalf("the waiter on a live place gave it up")
	}
	var a core.Attempt
	l.ask(&a, overdue, newMemberSource())
	if len(a.Places.IDs) != 1 || a.Places.At.IsZero() {
		t.Fatalf("the waiter that gave its place back asks %v at %v, want one new place and the time asked", a.Places.IDs, a.Places.At)
	}
	l.grant(&a, core.Reply{RiderReply: core.RiderReply{LeaseGranted: 1}}, []*waiter{overdue})
	if until := l.held[overdue.lease]; !until.Equal(a.Places.At.Add(l.TTL)) {
		t.Fatalf("the new place is known live until %v, want %v (asked at %v, plus the ttl)", until, a.Places.At.Add(l.TTL), a.Places.At)
	}
}

// A place held by a call the queue keeps behind others goes to the call
// the round claims a slot for: a high-priority call no longer gives its
// slot back for want of the place a normal call holds idle while it waits
// behind it. Left with the normal call, the place made the high call wait
// for it to run first, or, with high calls claiming every slot and giving
// it back, for ever (simulation seed 53268).
func TestInFlightPlaceFollowsTheClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		places := "{" + key + "}:inflight"
		th := mustNew(t, dial(), "{"+key+"}:rate", 1, time.Second, WithLogger(quiet),
			WithInFlight(places, 1, 3*time.Second))
		t0 := time.Now()
		if err := th.Do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []string
		done := make(chan error, 2)
		call := func(name string, p Priority) {
			done <- th.Do(ContextWithPriority(ctx, p), func(context.Context) error {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				return nil
			})
		}
		// The normal call's slot is a window ahead: it holds the place
		// until then. A pause over that slot sends it back to the queue
		// at its slot, holding its place.
		go call("normal", PriorityNormal)
		waitLocked(t, th, time.Second, "no place held for the normal call", func() bool { return len(th.lease.held) == 1 })
		if err := th.PauseUntil(ctx, t0.Add(2200*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		// The high call's first slot, after the pause, is more than a
		// second ahead (how far ahead a call reserves) until the normal
		// call is queued again behind it; the round that claims it keeps
		// the normal call, whose next slot is a window later.
		go call("high", PriorityHigh)
		for range 2 {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a call did not run within 10s")
			}
		}
		if mu.Lock(); order[0] != "high" {
			t.Fatalf("calls ran in the order %v: the high call waited for the place the normal one held", order)
		}
		mu.Unlock()
		waitKeeperIdle(t, th)
	})
}

// The places a process holds for waiters not gone yet go to the round's
// claims in the order of the claims: a kept waiter's first, then a later
// claim's that the taker goes before; never a lapsed place, and never
// from a claim the taker does not go before. A claim whose own place
// lapsed takes one too.
func TestInFlightHandOver(t *testing.T) {
	live := time.Now().Add(time.Hour)
	l := &leases{held: map[string]time.Time{"kept": live, "low": live, "first": live}, gone: map[string]struct{}{"lapsed": {}}}
	w := func(p Priority, tag float64, lease string) *waiter {
		return &waiter{wantLease: true, lease: lease, rank: rank{prio: p, tag: tag}}
	}
	kept, lapsed := w(PriorityLow, 9, "kept"), w(PriorityLow, 8, "lapsed")
	first := w(PriorityNormal, 1, "first")
	high1, high2, normal, low := w(PriorityHigh, 2, ""), w(PriorityHigh, 3, ""), w(PriorityNormal, 4, ""), w(PriorityLow, 5, "low")
	l.handOver([]*waiter{kept, lapsed}, []*waiter{first, high1, high2, normal, low})
	// first (normal) keeps its place: the high claims found theirs
	// before, and normal does not go before it (same priority, later).
	for _, c := range []struct {
		name  string
		w     *waiter
		lease string
	}{
		{"the first claim", first, "first"},
		{"the first high claim (from the queue)", high1, "kept"},
		{"the second high claim (from the low claim)", high2, "low"},
		{"the normal claim (nothing left it goes before)", normal, ""},
		{"the low claim", low, ""},
		{"the kept waiter", kept, ""},
		{"the waiter whose place lapsed", lapsed, "lapsed"},
	} {
		if c.w.lease != c.lease {
			t.Errorf("%s holds %q, want %q", c.name, c.w.lease, c.lease)
		}
	}
}

// A claim whose place lapsed takes a kept waiter's place, rather than ask
// Redis for one with every place taken, give its slot back and wait.
func TestInFlightHandOverToALapsedPlace(t *testing.T) {
	live := time.Now().Add(time.Hour)
	l := &leases{held: map[string]time.Time{"kept": live, "lapsed": live}}
	l.lost([]string{"lapsed"})
	claim := &waiter{wantLease: true, lease: "lapsed", rank: rank{prio: PriorityHigh}}
	kept := &waiter{wantLease: true, lease: "kept", rank: rank{prio: PriorityLow}}
	l.handOver([]*waiter{kept}, []*waiter{claim})
	if claim.lease != "kept" || kept.lease != "" {
		t.Fatalf("the claim holds %q and the kept waiter %q; want the kept waiter's place with the claim", claim.lease, kept.lease)
	}
}
