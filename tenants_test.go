package throttler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tenantRun is a run of tenants' floods and light calls on replicas of
// one key: each admission, when, and whose.
type tenantRun struct {
	mu    sync.Mutex
	at    []time.Time
	who   []string
	wait  map[string][]time.Duration
	waits []time.Duration
	errs  []error
}

// fail records a wait of tenant's that failed with err.
func (r *tenantRun) fail(tenant string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Errorf("%s: %w", tenant, err))
}

func (r *tenantRun) note(tenant string, waited time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, time.Now())
	r.who = append(r.who, tenant)
	r.waits = append(r.waits, waited)
	if r.wait == nil {
		r.wait = map[string][]time.Duration{}
	}
	r.wait[tenant] = append(r.wait[tenant], waited)
}

// shares counts each tenant's admissions between from and to.
func (r *tenantRun) shares(from, to time.Time) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for i, at := range r.at {
		if !at.Before(from) && at.Before(to) {
			out[r.who[i]]++
		}
	}
	return out
}

func (r *tenantRun) p99(tenant string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var w []time.Duration
	for i, who := range r.who {
		if who == tenant && r.at[i].After(r.at[0].Add(3*time.Second)) {
			w = append(w, r.waits[i])
		}
	}
	if len(w) == 0 {
		return 0
	}
	sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
	return w[len(w)*99/100]
}

// flood runs goroutines that wait for tenant on th until ctx ends.
func (r *tenantRun) flood(ctx context.Context, wg *sync.WaitGroup, th *Throttler, tenant string, goroutines int) {
	for range goroutines {
		wg.Go(func() {
			tctx := ContextWithTenant(ctx, tenant)
			for ctx.Err() == nil {
				start := time.Now()
				if th.Wait(tctx) == nil {
					r.note(tenant, time.Since(start))
				}
			}
		})
	}
}

// every has tenant wait on th every period, from a random phase, until
// ctx ends, counting the waits begun in sent.
func (r *tenantRun) every(ctx context.Context, wg *sync.WaitGroup, th *Throttler, tenant string, period time.Duration, sent *atomic.Int64) {
	wg.Go(func() {
		// The calls made go on past the run's end: each is to be admitted.
		tctx := ContextWithTenant(context.Background(), tenant)
		time.Sleep(time.Duration(rand.Int64N(int64(period)))) // a random phase
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			start := time.Now()
			sent.Add(1)
			if err := th.Wait(tctx); err != nil {
				r.fail(tenant, err)
			} else {
				r.note(tenant, time.Since(start))
			}
		}
	})
}

// replicasOf returns n Throttlers on one key made with opts, as n
// replicas have, their admissions watched by rec.
func replicasOf(t *testing.T, dial dialer, key string, n, limit int, interval time.Duration, rec *recorder, opts ...Option) []*Throttler {
	var ths []*Throttler
	for range n {
		ths = append(ths, rec.watch(mustNew(t, dial(), key, limit, interval, opts...)))
	}
	return ths
}

// skewedShares has three tenants flood one key for 3s from replicas of
// it made with opts (a from all 3, b from the first, c from the first
// two, 10 goroutines each), and returns each one's share of the calls
// admitted from 1s on, once the shares are known; it checks that no
// window held more than the limit.
func skewedShares(t *testing.T, dial dialer, key string, opts ...Option) map[string]float64 {
	var rec recorder
	const limit = 50
	interval := 500 * time.Millisecond
	ths := replicasOf(t, dial, key, 3, limit, interval, &rec, opts...)
	var run tenantRun
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for i, th := range ths {
		run.flood(ctx, &wg, th, "a", 10)
		if i == 0 {
			run.flood(ctx, &wg, th, "b", 10)
		}
		if i < 2 {
			run.flood(ctx, &wg, th, "c", 10)
		}
	}
	wg.Wait()
	got := run.shares(start.Add(time.Second), start.Add(3*time.Second))
	t.Logf("calls admitted from 1s to 3s: %v", got)
	total := float64(got["a"] + got["b"] + got["c"])
	shares := map[string]float64{}
	for tenant, n := range got {
		shares[tenant] = float64(n) / total
	}
	assertWindow(t, rec.scores(), interval+ths[0].opt.buffer, limit)
	return shares
}

// Three tenants flood one key from 3, 1 and 2 of its 3 replicas: once the
// shares are known, each gets about a third of the calls, although the
// one on every replica makes three times the round trips of the one on
// one replica; and no window holds more than the limit. (Without shares,
// b, on one replica, got 17% of the calls, a 50%.)
func TestTenantSharesAcrossReplicas(t *testing.T) {
	shareBackends(t, func(t *testing.T, dial dialer, key string) {
		shares := skewedShares(t, dial, key)
		for _, tenant := range []string{"a", "b", "c"} {
			if share := shares[tenant]; share < 0.25 || share > 0.42 {
				t.Errorf("tenant %s had %.0f%% of the calls, want about a third", tenant, share*100)
			}
		}
	})
}

// The same with weights 2:1:1: a gets about half the calls, and b and c
// a quarter each, across the replicas.
func TestTenantWeightedSharesAcrossReplicas(t *testing.T) {
	shareBackends(t, func(t *testing.T, dial dialer, key string) {
		shares := skewedShares(t, dial, key, WithTenantWeight(func(tenant string) float64 {
			if tenant == "a" {
				return 2
			}
			return 1
		}))
		for tenant, want := range map[string]float64{"a": 0.5, "b": 0.25, "c": 0.25} {
			if share := shares[tenant]; share < want-0.08 || share > want+0.08 {
				t.Errorf("tenant %s had %.0f%% of the calls, want about %.0f%%", tenant, share*100, want*100)
			}
		}
	})
}

// A tenant floods one key from every replica while two others make a call
// every 500ms from each: every call of theirs is admitted, the window
// holds, and the flood takes the rest. (How long the light calls wait is
// a benchmark's to measure; the log shows it.)
func TestTenantFloodLeavesRoom(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var rec recorder
		const limit = 100
		interval := time.Second
		ths := replicasOf(t, dial, key, 3, limit, interval, &rec)
		var run tenantRun
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		sent := new(atomic.Int64)
		start := time.Now()
		for _, th := range ths {
			run.flood(ctx, &wg, th, "a", 30)
			run.every(ctx, &wg, th, "b", 500*time.Millisecond, sent)
			run.every(ctx, &wg, th, "c", 500*time.Millisecond, sent)
		}
		wg.Wait()
		all := run.shares(start, start.Add(time.Minute))
		if got := int64(all["b"] + all["c"]); got != sent.Load() || len(run.errs) > 0 {
			t.Fatalf("%d light calls admitted of %d made; errors %v", got, sent.Load(), run.errs)
		}
		steady := run.shares(start.Add(2*time.Second), start.Add(5*time.Second))
		t.Logf("from 2s: %v; light waits p99 %s, %s", steady, run.p99("b"), run.p99("c"))
		assertWindow(t, rec.scores(), interval+ths[0].opt.buffer, limit)
	})
}
