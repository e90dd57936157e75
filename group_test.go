package throttler

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// quotaOf returns a limits function that gives every key q.
func quotaOf(q KeyQuota) func(string) (KeyQuota, error) {
	return func(string) (KeyQuota, error) { return q, nil }
}

func mustGroup(t testing.TB, c redis.UniversalClient, prefix string, q KeyQuota, opts ...GroupOption) *Group {
	t.Helper()
	g, err := NewGroup(c, prefix, quotaOf(q), opts...)
	if err != nil {
		t.Fatalf("NewGroup(%q): %v", prefix, err)
	}
	return g
}

func mustFor(t testing.TB, g *Group, key string) *Throttler {
	t.Helper()
	th, err := g.For(key)
	if err != nil {
		t.Fatalf("For(%q): %v", key, err)
	}
	return th
}

// holds reports whether th is still the Group's Throttler for its key.
func (g *Group) holds(th *Throttler) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.ring {
		if e.t == th {
			return true
		}
	}
	return false
}

func miniClient(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { c.Close() })
	return mr, c
}

func TestNewGroupRejectsBadInput(t *testing.T) {
	_, c := miniClient(t)
	ok := quotaOf(KeyQuota{Limit: 1, Interval: time.Second})
	for name, f := range map[string]func() (*Group, error){
		"nil client":    func() (*Group, error) { return NewGroup(nil, "p", ok) },
		"nil limits":    func() (*Group, error) { return NewGroup(c, "p", nil) },
		"empty prefix":  func() (*Group, error) { return NewGroup(c, "", ok) },
		"brace":         func() (*Group, error) { return NewGroup(c, "p{x}", ok) },
		"closing brace": func() (*Group, error) { return NewGroup(c, "p}", ok) },
		"nil option":    func() (*Group, error) { return NewGroup(c, "p", ok, nil) },
		"nil logger":    func() (*Group, error) { return NewGroup(c, "p", ok, WithGroupLogger(nil)) },
		"learn disabled": func() (*Group, error) {
			return nil, mustGroup(t, c, "p", KeyQuota{}).Learn(context.Background(), "k", 1, time.Second)
		},
	} {
		if _, err := f(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v, want an error wrapping ErrInvalidArgument", name, err)
		}
	}

	const secret = "s3cret-t0ken"
	for name, q := range map[string]KeyQuota{
		"zero limit":         {Interval: time.Second},
		"zero interval":      {Limit: 1},
		"bad second limit":   {Limit: 1, Interval: time.Second, More: []Rate{{Limit: 0, Interval: time.Second}}},
		"negative in flight": {Limit: 1, Interval: time.Second, InFlight: -1},
		"short lease":        {Limit: 1, Interval: time.Second, InFlight: 1, InFlightTTL: time.Second},
		"negative pacing":    {Limit: 10, Interval: time.Second, Pacing: -1},
		"pacing the limit":   {Limit: 10, Interval: time.Second, Pacing: 10},
	} {
		g := mustGroup(t, c, "p", q)
		_, err := g.For(secret)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: For: got %v, want an error wrapping ErrInvalidArgument", name, err)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error quotes the key: %v", name, err)
		}
	}
	g := mustGroup(t, c, "p", KeyQuota{Limit: 1, Interval: time.Second})
	if _, err := g.For(""); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf(`For(""): got %v, want an error wrapping ErrInvalidArgument`, err)
	}
	g = mustGroup(t, c, "p", KeyQuota{Limit: 1, Interval: time.Second}, WithLearnedLimits())
	for _, tc := range []struct {
		key   string
		limit int
		ttl   time.Duration
	}{{"", 1, time.Second}, {"k", 0, time.Second}, {"k", 1, 0}} {
		if err := g.Learn(context.Background(), tc.key, tc.limit, tc.ttl); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Learn(%q, %d, %s): got %v, want an error wrapping ErrInvalidArgument", tc.key, tc.limit, tc.ttl, err)
		}
	}

	failing := errors.New("no plan for this store")
	g, err := NewGroup(c, "p", func(string) (KeyQuota, error) { return KeyQuota{}, failing })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.For(secret); !errors.Is(err, failing) || strings.Contains(err.Error(), secret) {
		t.Errorf("For with a failing limits function: got %v, want it wrapped, without the key", err)
	}
	if g.Len() != 0 {
		t.Errorf("Len = %d after failed Fors, want 0", g.Len())
	}
}

// TestGroupForSameUntilEvicted: For gives a key the same Throttler until it
// is evicted, named by its digest; Sweep evicts every idle key.
func TestGroupForSameUntilEvicted(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		prefix := key + ":"
		g := mustGroup(t, dial(), prefix, KeyQuota{Limit: 10, Interval: time.Second})
		alice, bob := mustFor(t, g, "alice"), mustFor(t, g, "bob")
		if alice == bob {
			t.Fatal("two keys share a Throttler")
		}
		if again := mustFor(t, g, "alice"); again != alice {
			t.Fatal("For gave a key a second Throttler before evicting the first")
		}
		named := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `\{[0-9A-Za-z_-]{16}\}$`)
		if !named.MatchString(alice.Key()) || strings.Contains(alice.Key(), "alice") {
			t.Fatalf("Key() = %q, want %s{16 base64 characters}", alice.Key(), prefix)
		}
		if g.Len() != 2 {
			t.Fatalf("Len = %d, want 2", g.Len())
		}
		if err := alice.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, alice)
		time.Sleep(60 * time.Millisecond) // its slot passed by the buffer
		if n := g.Sweep(); n != 2 || g.Len() != 0 {
			t.Fatalf("Sweep evicted %d, %d left; want both idle keys evicted", n, g.Len())
		}
		if mustFor(t, g, "alice") == alice {
			t.Fatal("For gave back an evicted Throttler")
		}
	})
}

// TestGroupHandEvictsUnused: For's clock hand evicts an idle key once it
// has passed it twice with no use in between: For handing it out, or a
// round trip of a caller that kept it.
func TestGroupHandEvictsUnused(t *testing.T) {
	_, c := miniClient(t)
	g := mustGroup(t, c, "p", KeyQuota{Limit: 100, Interval: time.Second})
	ctx := context.Background()
	a := mustFor(t, g, "a")
	if err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, a)
	mustFor(t, g, "b") // the hand finds a handed out: it clears that
	// A caller that kept a uses it: a round trip.
	if err := a.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, a)
	time.Sleep(60 * time.Millisecond) // its slot passed by the buffer
	mustFor(t, g, "b")                // the hand finds a round trip since its last visit
	if !g.holds(a) {
		t.Fatal("a key used since the hand's last visit was evicted")
	}
	mustFor(t, g, "b") // nothing since: evicted
	if g.holds(a) || g.Len() != 1 {
		t.Fatalf("an idle key unused for a lap is still held (Len %d)", g.Len())
	}
	if mustFor(t, g, "a") == a {
		t.Fatal("For gave back an evicted Throttler")
	}
}

// TestGroupHandVisitsAtMostFour: each For moves the hand over at most 4
// keys (groupVisits, as Group's doc states), the one it is asked for
// passed over but counted: of ten idle keys the hand has passed once, a
// For for a new key evicts four, and one for the key at the hand evicts
// three and hands that key out.
func TestGroupHandVisitsAtMostFour(t *testing.T) {
	_, c := miniClient(t)
	g := mustGroup(t, c, "p", KeyQuota{Limit: 10, Interval: time.Second})
	names := map[*Throttler]string{}
	set := func(f func(e *groupEntry)) {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, e := range g.ring {
			f(e)
		}
	}
	for i := range 10 {
		k := fmt.Sprint("k", i)
		names[mustFor(t, g, k)] = k
		set(func(e *groupEntry) { e.used = true }) // as if handed out again: the hand evicts none
	}
	if g.Len() != 10 {
		t.Fatalf("Len = %d, want the 10 keys handed out since the hand passed", g.Len())
	}
	// The hand has passed every key once, and none was used since.
	passed := func() {
		set(func(e *groupEntry) { _, e.round = e.t.dormant(); e.used = false })
		g.mu.Lock()
		g.hand = 0
		g.mu.Unlock()
	}
	passed()
	names[mustFor(t, g, "new")] = "new"
	if n := g.Len(); n != 10-4+1 {
		t.Fatalf("a For for a new key left %d of 10 idle keys the hand had passed, want 6 and the new one", n-1)
	}
	passed()
	g.mu.Lock()
	at := g.ring[g.hand].t
	g.mu.Unlock()
	if got := mustFor(t, g, names[at]); got != at {
		t.Fatal("For evicted the key it was asked for, at the hand")
	}
	if n := g.Len(); n != 7-3 || !g.holds(at) {
		t.Fatalf("a For for the key at the hand left %d keys of 7 (holding it: %t), want 4: three evicted, it passed over", n, g.holds(at))
	}
}

// TestGroupKeepsBusyKeys: a key with a caller waiting, a call sleeping
// toward a slot reserved ahead, or a place in flight held is not evicted,
// by the hand or by Sweep; once it is idle, it is.
func TestGroupKeepsBusyKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		sweepUntilEvicted := func(t *testing.T, g *Group, th *Throttler) {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			for g.Sweep(); g.holds(th); g.Sweep() {
				if time.Now().After(deadline) {
					t.Fatal("an idle key is still held 5s on")
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		// busy checks that neither the hand nor Sweep evicts th.
		busy := func(t *testing.T, g *Group, th *Throttler, what string) {
			t.Helper()
			for i := range 3 {
				mustFor(t, g, fmt.Sprint("other-", i))
			}
			g.Sweep()
			if !g.holds(th) {
				t.Fatalf("a key with %s was evicted", what)
			}
		}

		t.Run("waiter", func(t *testing.T) {
			g := mustGroup(t, dial(), key+":w:", KeyQuota{Limit: 1, Interval: time.Hour})
			th := mustFor(t, g, "k")
			if err := th.Wait(ctx); err != nil { // the hour's only call
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- th.Wait(wctx) }()
			waitLocked(t, th, 5*time.Second, "the second call never queued", func() bool { return len(th.worker.queue) == 1 })
			busy(t, g, th, "a caller waiting")
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait: %v", err)
			}
			sweepUntilEvicted(t, g, th)
		})

		t.Run("reserved ahead", func(t *testing.T) {
			// Reserve-ahead is the interval: the third call gets the slot
			// the first frees, up to 450ms ahead, and sleeps toward it.
			g := mustGroup(t, dial(), key+":r:", KeyQuota{Limit: 2, Interval: 400 * time.Millisecond})
			th := mustFor(t, g, "k")
			for range 2 {
				if err := th.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- th.Wait(ctx) }()
			waitLocked(t, th, 5*time.Second, "the third call never got its slot", func() bool {
				return len(th.health.journal.Entries) == 3 && len(th.worker.queue) == 0
			})
			th.mu.Lock()
			ahead := th.health.journal.Entries[2].Score - th.clock.Server(th.now())
			th.mu.Unlock()
			if ahead < 50_000 {
				t.Skipf("the slot came only %dµs ahead: the machine is too slow for this test", ahead)
			}
			// The worker exits: only the sleeping call holds the key (and
			// the listener for news its sleep keeps).
			waitLocked(t, th, 10*time.Second, "worker still running", func() bool { return !th.worker.running })
			busy(t, g, th, "a slot reserved ahead")
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			sweepUntilEvicted(t, g, th)
		})

		t.Run("in flight", func(t *testing.T) {
			g := mustGroup(t, dial(), key+":f:", KeyQuota{Limit: 100, Interval: time.Second, InFlight: 1})
			th := mustFor(t, g, "k")
			p, err := th.Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			waitIdle(t, th)
			busy(t, g, th, "a place in flight held")
			p.Done()
			waitLocked(t, th, 5*time.Second, "the lease keeper never exited", func() bool { return !th.lease.keeper })
			sweepUntilEvicted(t, g, th)
		})
	})
}

// TestGroupReplicasShareQuota: two replicas' Groups on one Redis, calling
// For for each call, keep each key's sliding window, and keys apart.
func TestGroupReplicasShareQuota(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const (
			limit      = 4
			interval   = 150 * time.Millisecond
			replicas   = 2
			goroutines = 3
			calls      = 4
		)
		keys := []string{"store-a", "store-b", "store-c"}
		var mu sync.Mutex
		recs := map[string]*recorder{} // by Redis key
		groups := make([]*Group, replicas)
		for i := range groups {
			groups[i] = mustGroup(t, dial(), key+":", KeyQuota{Limit: limit, Interval: interval})
			groups[i].onMake = func(th *Throttler) {
				mu.Lock()
				defer mu.Unlock()
				r := recs[th.Key()]
				if r == nil {
					r = &recorder{}
					recs[th.Key()] = r
				}
				r.watch(th)
			}
		}
		var wg sync.WaitGroup
		for _, g := range groups {
			for _, k := range keys {
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range calls {
							th, err := g.For(k)
							if err == nil {
								err = th.Wait(context.Background())
							}
							if err != nil {
								t.Errorf("For(%q).Wait: %v", k, err)
								return
							}
						}
					}()
				}
			}
		}
		wg.Wait()
		if len(recs) != len(keys) {
			t.Fatalf("%d Redis keys for %d keys", len(recs), len(keys))
		}
		for name, r := range recs {
			s := r.scores()
			if len(s) != replicas*goroutines*calls {
				t.Errorf("%s: %d calls admitted, want %d", name, len(s), replicas*goroutines*calls)
			}
			assertWindow(t, s, interval+50*time.Millisecond, limit)
		}
		for _, g := range groups {
			g.mu.Lock()
			ring := append([]*groupEntry(nil), g.ring...)
			g.mu.Unlock()
			for _, e := range ring {
				waitIdle(t, e.t)
			}
		}
	})
}

// TestGroupKeysExpire: a key's Redis keys (every limit's, the places in
// flight's, the learned limit's) are named by its digest, and expire once
// nothing in them counts.
func TestGroupKeysExpire(t *testing.T) {
	mr, c := miniClient(t)
	q := KeyQuota{Limit: 10, Interval: time.Second, More: []Rate{{Limit: 100, Interval: time.Minute}}, InFlight: 2}
	g := mustGroup(t, c, "api:", q, WithLearnedLimits())
	ctx := context.Background()
	var made []*Throttler
	for i := range 20 {
		th := mustFor(t, g, fmt.Sprint("customer-", i))
		made = append(made, th)
		if err := th.Do(ctx, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Learn(ctx, "customer-0", 5, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, th := range made {
		waitIdle(t, th)
		waitLocked(t, th, 5*time.Second, "lease keeper still running", func() bool { return !th.lease.keeper })
	}
	keys := mr.Keys()
	for _, k := range keys {
		if strings.Contains(k, "customer") {
			t.Fatalf("Redis key %q names the key in clear", k)
		}
	}
	if len(keys) != 20*2+1 {
		// The places in flight's sets emptied, and left.
		t.Fatalf("%d Redis keys for 20 keys with two limits and a learned limit: %q", len(keys), keys)
	}
	mr.FastForward(2 * time.Minute) // past the longest window's TTL and the leases' keys'
	left := mr.Keys()
	if len(left) != 1 || !strings.HasSuffix(left[0], learnedSuffix) {
		t.Fatalf("Redis keys left once nothing counts: %q; want only the learned limit", left)
	}
	mr.FastForward(time.Hour)
	if left := mr.Keys(); len(left) != 0 {
		t.Fatalf("Redis keys left after the learned limit's TTL: %q", left)
	}
}

// TestGroupLearn: a limit learned in one replica is the one every replica
// makes the key's Throttler with; a lower one lowers the Throttlers
// already made, a higher one has them made anew, in every replica.
func TestGroupLearn(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		q := KeyQuota{Limit: 5, Interval: time.Hour}
		a := mustGroup(t, dial(), key+":", q, WithLearnedLimits())
		b := mustGroup(t, dial(), key+":", q, WithLearnedLimits())
		old := mustFor(t, b, "installation-1")
		if err := old.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Learn(ctx, "installation-1", 2, time.Minute); err != nil {
			t.Fatal(err)
		}
		// Learn made a's Throttler first, with the KeyQuota's limit, and
		// lowered it through Redis.
		if th := mustFor(t, a, "installation-1"); th.Limit() != 5 || th.Stats().LimitNow != 2 {
			t.Fatalf("a's Throttler: limit %d, %d in force; want 5 lowered to 2", th.Limit(), th.Stats().LimitNow)
		}
		// b's Throttler keeps New's limit, lowered through Redis: it
		// learns so with its next round trip.
		if res, err := old.Allow(ctx); err != nil || !res.Allowed {
			t.Fatalf("Allow: %+v, %v", res, err)
		}
		if res, err := old.Allow(ctx); err != nil || res.Allowed || old.Stats().LimitNow != 2 {
			t.Fatalf("third call under a learned limit of 2: %+v, %v (limit in force %d)", res, err, old.Stats().LimitNow)
		}
		if th := mustFor(t, mustGroup(t, dial(), key+":", q, WithLearnedLimits()), "installation-1"); th.Limit() != 2 {
			t.Fatalf("a new replica's Throttler has limit %d, want the learned 2", th.Limit())
		}
		if th := mustFor(t, mustGroup(t, dial(), key+":", q), "installation-1"); th.Limit() != 5 {
			t.Fatalf("a Group made without WithLearnedLimits read a learned limit (%d)", th.Limit())
		}

		// Higher, learned in a: a's Throttler is made anew at once, b's
		// once its round trip has read what the key states.
		if err := a.Learn(ctx, "installation-1", 50, time.Minute); err != nil {
			t.Fatal(err)
		}
		if th := mustFor(t, a, "installation-1"); th.Limit() != 50 {
			t.Fatalf("a's Throttler after a higher limit was learned: limit %d, want 50", th.Limit())
		}
		if th := mustFor(t, b, "installation-1"); th != old {
			t.Fatal("b made its Throttler anew before reading the key")
		}
		if _, err := old.Allow(ctx); err != nil {
			t.Fatal(err)
		}
		th := mustFor(t, b, "installation-1")
		if th == old || th.Limit() != 50 {
			t.Fatalf("b's Throttler after reading a higher limit: the same %v, limit %d; want a new one with 50", th == old, th.Limit())
		}
		if res, err := th.Allow(ctx); err != nil || !res.Allowed || th.Stats().LimitNow != 50 {
			t.Fatalf("Allow under the higher learned limit: %+v, %v (limit in force %d)", res, err, th.Stats().LimitNow)
		}
		if again := mustFor(t, b, "installation-1"); again != th {
			t.Fatal("b made its Throttler anew twice for one learned limit")
		}
	})
}

// TestGroupLearnRoundTrips: Learn takes the round trips its doc counts:
// For's GET when it makes the key's Throttler, the SET, and one write,
// after one to three samples of a clock the Group's Throttlers have not
// read yet.
func TestGroupLearnRoundTrips(t *testing.T) {
	_, c := miniClient(t)
	count := roundTrips(c)
	g := mustGroup(t, c, "p", KeyQuota{Limit: 5, Interval: time.Hour}, WithLearnedLimits())
	learn := func(key string) int {
		t.Helper()
		before := count()
		if err := g.Learn(context.Background(), key, 2, time.Minute); err != nil {
			t.Fatal(err)
		}
		return count() - before
	}
	if n := learn("a"); n < 4 || n > 6 {
		t.Errorf("Learn on a new key, the server's clock not read yet: %d round trips, want 4 to 6 (GET, SET, 1 to 3 samples, write)", n)
	}
	if n := learn("b"); n != 3 {
		t.Errorf("Learn on a new key, the Group's clock read: %d round trips, want 3 (GET, SET, write)", n)
	}
	if n := learn("b"); n != 2 {
		t.Errorf("Learn on a key the Group holds: %d round trips, want 2 (SET, write)", n)
	}
}

// TestGroupSharesClock: a Group's Throttlers on one server share one
// estimate of its clock, so a new one takes no round trip to read it;
// one given its own clock (WithClock), or on a cluster client, keeps its
// own.
func TestGroupSharesClock(t *testing.T) {
	mr, c := miniClient(t)
	quota := func(string) (KeyQuota, error) { return KeyQuota{Limit: 10, Interval: time.Second}, nil }
	g, err := NewGroup(c, "p", quota)
	if err != nil {
		t.Fatal(err)
	}
	ownClock, err := NewGroup(c, "own", quota, WithThrottlerOptions(WithClock(time.Now)))
	if err != nil {
		t.Fatal(err)
	}
	a := mustFor(t, g, "a")
	if err := a.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := mustFor(t, g, "b")
	if b.clock != a.clock || !b.clock.Synced() {
		t.Fatal("a second key's Throttler does not share the first's synced clock estimate")
	}
	if own := mustFor(t, ownClock, "a"); own.clock == a.clock {
		t.Fatal("a Throttler given WithClock shares the Group's clock estimate")
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{mr.Addr()}})
	defer cc.Close()
	if mustGroup(t, cc, "p", KeyQuota{Limit: 1, Interval: time.Second}).clock != nil {
		t.Fatal("a Group on a cluster client shares one clock estimate across servers")
	}
}

// WithThrottlerOptions refuses, when the Group is made, what would fail
// each key's Throttler later: a nil or bad option, and the options that
// name Redis keys of their own (KeyQuota's More, InFlight and Pacing).
func TestWithThrottlerOptionsChecked(t *testing.T) {
	_, c := miniClient(t)
	quota := func(string) (KeyQuota, error) { return KeyQuota{Limit: 10, Interval: time.Second}, nil }
	for name, opt := range map[string]Option{
		"nil":          nil,
		"bad buffer":   WithBuffer(-time.Second),
		"WithLimit":    WithLimit("elsewhere", 1, time.Second),
		"WithInFlight": WithInFlight("elsewhere", 1, 0),
		"WithPacing":   WithPacing(2),
	} {
		if _, err := NewGroup(c, "p", quota, WithThrottlerOptions(opt)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: NewGroup: %v, want ErrInvalidArgument", name, err)
		}
	}
	g, err := NewGroup(c, "p", func(string) (KeyQuota, error) {
		return KeyQuota{Limit: 10, Interval: time.Second, Pacing: 2}, nil
	}, WithThrottlerOptions(WithMaxWait(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	th := mustFor(t, g, "k")
	if th.opt.waits.maxWait != time.Minute || len(th.rules.Wins) != 2 || th.rules.Wins[1].Limit != 2 {
		t.Fatalf("the Throttler made: max wait %s, limits %+v; want a minute, and a pace of 2", th.opt.waits.maxWait, th.rules.Wins)
	}
}

// Calls of For that find no Throttler for a key at the same moment share
// one call of the limits function and the one Throttler it makes.
func TestGroupMakesAKeyOnce(t *testing.T) {
	_, c := miniClient(t)
	var calls atomic.Int32
	release := make(chan struct{})
	g, err := NewGroup(c, "p", func(string) (KeyQuota, error) {
		calls.Add(1)
		<-release // hold every caller that comes meanwhile
		return KeyQuota{Limit: 10, Interval: time.Second}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	const callers = 16
	got := make([]*Throttler, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { got[i] = mustFor(t, g, "k") })
	}
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the others reach For meanwhile
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("limits called %d times for one key asked for by %d callers at once, want 1", n, callers)
	}
	for i, th := range got {
		if th != got[0] {
			t.Fatalf("caller %d got another Throttler", i)
		}
	}
}
