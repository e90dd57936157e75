package throttler

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/counters"
	"github.com/go-throttler/throttler/internal/netfault"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Every Lua script the library sends touches only the keys it declares in
// KEYS, as Dragonfly and some Redis Cluster proxies require: a workload
// that runs each of redisstore's scripts goes through clients whose every
// EVAL and EVALSHA runs a guarded copy of its script (redistest.KeyGuard),
// which fails on a key not in KEYS and on a command it has no key
// positions for. No violation is recorded, and every script in
// redisstore.Scripts ran under the guard at least once. On miniredis and
// on redis-server.
func TestDeclaredKeysOnly(t *testing.T) {
	guardedBackends(t, func(t *testing.T, dial dialer, key string, g *redistest.KeyGuard) {
		declaredTenants(t, dial, key+":tenants")
		declaredCompacted(t, dial, key+":compacted", g)
		declaredInFlight(t, dial, key)
		declaredCounters(t, dial, key+":counters")
		for _, v := range g.Violations() {
			t.Errorf("%s touched what it did not declare (%d times): %s", v.Script, v.N, v.Problem)
		}
		ran := g.Ran()
		for name := range redisstore.Scripts() {
			if ran[name] == 0 {
				t.Errorf("%s never ran under the guard: the workload must run it", name)
			}
		}
		t.Logf("runs under the guard: %v", ran)
	})
}

// declaredTenants runs three replicas on key, under a second limit, with
// tenants held to caps near the limit (two floods beside light calls);
// one replica is behind a link whose replies come 60ms late, so that Redis
// places its claims and its loose clock publishes a margin: TenantScript,
// TenantPeakScript, TenantScoresScript, PeakScript, PlaceScript and
// WideScript.
func declaredTenants(t *testing.T, dial dialer, key string) {
	const limit, interval = 30, 300 * time.Millisecond
	proxy, err := netfault.Listen(dial().(*redis.Client).Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	proxy.SetDelay(0, 60*time.Millisecond)
	second := WithLimit("{"+key+"}:long", 2*limit, 2*interval)
	key = "{" + key + "}:short"
	ths := []*Throttler{
		mustNew(t, dial(func(o *redis.Options) { o.Addr = proxy.Addr() }), key, limit, interval, second, WithLogger(quiet)),
		mustNew(t, dial(), key, limit, interval, second, WithLogger(quiet)),
		mustNew(t, dial(), key, limit, interval, second, WithLogger(quiet)),
	}
	var run tenantRun
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, th := range ths {
		run.flood(ctx, &wg, th, "flood", 6)
		if i == 1 {
			run.flood(ctx, &wg, th, "other", 3)
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				if th.Wait(ContextWithTenant(ctx, "light")) == nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	for _, th := range ths {
		waitIdle(t, th)
	}
}

// declaredCompacted compacts a window whose calls are then settled, and
// waited for by callers who give up their claims on slots ahead:
// CompactScript, CountScript (rounds that learn the slots of a compacted
// window) and GiveBackScript, run at least twice (the settle, and the
// waits given up after their claims were written).
func declaredCompacted(t *testing.T, dial dialer, key string, g *redistest.KeyGuard) {
	ctx := context.Background()
	th := mustNew(t, dial(), key, 10, time.Second, withCompaction(1, 64), WithReserveAhead(time.Second), WithLogger(quiet))
	p, err := th.Acquire(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	// Calls compact after a quarter of the interval; a refused attempt's
	// round trip trims, so compacts.
	time.Sleep(400 * time.Millisecond)
	if _, err := th.Allow(ctx); err != nil {
		t.Fatal(err)
	}
	gaveBack := g.Ran()["GiveBackScript"]
	if err := p.Settle(ctx, 4); err != nil { // 6 slots free again
		t.Fatal(err)
	}
	// 3 waits take the 6 slots; the others claim slots ahead, when the
	// window frees, and are given up before then.
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := th.WaitN(wctx, 2); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("WaitN: %v", err)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	wg.Wait()
	waitIdle(t, th)
	if n := g.Ran()["GiveBackScript"] - gaveBack; n < 2 || th.Stats().Abandoned == 0 {
		t.Errorf("GiveBackScript ran %d times for a settle and %d waits given up, want at least twice", n, th.Stats().Abandoned)
	}
}

// declaredInFlight runs calls on two replicas that share 2 places in
// flight, more than fit at once, then one longer than a third of its
// lease: LeaseScript, ReleaseScript and RenewScript.
func declaredInFlight(t *testing.T, dial dialer, key string) {
	places := "{" + key + "}:inflight"
	var ths []*Throttler
	for range 2 {
		ths = append(ths, mustNew(t, dial(), "{"+key+"}:rate", 1000, time.Second, WithLogger(quiet), WithInFlight(places, 2, 0)))
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 3 {
				err := ths[i%2].Do(context.Background(), func(context.Context) error {
					time.Sleep(5 * time.Millisecond)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	long := mustNew(t, dial(), "{"+key+"}:rate", 1000, time.Second, WithLogger(quiet), WithInFlight(places, 2, minLeaseTTL))
	err := long.Do(context.Background(), func(context.Context) error {
		time.Sleep(minLeaseTTL/3 + 200*time.Millisecond) // past the first renewal
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	for _, th := range append(ths, long) {
		waitKeeperIdle(t, th)
		waitIdle(t, th)
	}
}

// declaredCounters sends requests to an API that answers its own
// counter, read by the Transport: CounterScript.
func declaredCounters(t *testing.T, dial dialer, key string) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit", `"default";r=3;t=1`)
	}))
	defer api.Close()
	defer api.Client().CloseIdleConnections()
	th := mustNew(t, dial(), key, 100, time.Second, WithLogger(quiet))
	c := &http.Client{Transport: &Transport{Base: api.Client().Transport, Route: th.Route(), Counters: counters.IETF()}}
	for range 3 {
		if code, _ := do(t, c, api.URL); code != http.StatusOK {
			t.Fatalf("GET: %d", code)
		}
	}
	waitIdle(t, th)
}
