package throttlerotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/go-throttler/throttler"
)

// The waits of tenants carry throttler.tenant.id: the first tenants their
// own, the others "other"; throttler.tenant.admitted counts their units
// apart; a wait without a tenant carries none, and throttler.admitted
// still counts every unit once.
func TestTenantMetrics(t *testing.T) {
	s := newSink(t)
	rdb, _ := newRedis(t)
	th := instrumented(t, s, rdb, "tenants", 7, time.Minute, nil, WithMaxTenants(2))
	bg := context.Background()
	of := func(tenant string) context.Context { return throttler.ContextWithTenant(bg, tenant) }
	for _, w := range []struct {
		ctx context.Context
		n   int
	}{{of("a"), 2}, {of("b"), 1}, {of("a"), 1}, {of("c"), 1}, {bg, 1}, {of("d"), 1}} {
		if err := th.WaitN(w.ctx, w.n); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(of("b"), time.Second)
	defer cancel()
	if err := th.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait over the limit: %v, want it turned away for its deadline", err)
	}

	got := s.collect(t)
	key := KeyAttribute.String("tenants")
	if v, n := got.sum(t, "throttler.admitted", key); n != 1 || v != 7 {
		t.Errorf("throttler.admitted = %v in %d points, want 7 in 1", v, n)
	}
	if _, n := got.sum(t, "throttler.tenant.admitted"); n != 3 {
		t.Errorf("throttler.tenant.admitted has %d points, want 3 (a, b, other)", n)
	}
	admitted := OutcomeAttribute.String("admitted")
	for _, c := range []struct {
		tenant attribute.KeyValue
		units  float64 // in throttler.tenant.admitted
		waits  uint64  // admitted, in throttler.wait.duration
	}{
		{TenantAttribute.String("a"), 3, 2},
		{TenantAttribute.String("b"), 1, 1},
		{TenantAttribute.String(OtherTenant), 2, 2}, // c and d
		{absent(TenantAttribute), 0, 1},
	} {
		if v, _ := got.sum(t, "throttler.tenant.admitted", key, c.tenant); v != c.units {
			t.Errorf("throttler.tenant.admitted{%v} = %v, want %v", c.tenant, v, c.units)
		}
		if n, _ := got.count(t, "throttler.wait.duration", key, admitted, c.tenant); n != c.waits {
			t.Errorf("throttler.wait.duration{%v, admitted} holds %d waits, want %d", c.tenant, n, c.waits)
		}
	}
	deadline := []attribute.KeyValue{key, OutcomeAttribute.String("deadline"), TenantAttribute.String("b")}
	if n, _ := got.count(t, "throttler.wait.duration", deadline...); n != 1 {
		t.Errorf("throttler.wait.duration holds %d of b's waits turned away, want 1", n)
	}
}

// A Group's Throttlers share one bound: the tenants of one key take the
// values the other's tenants then do without.
func TestTenantBoundSharedByAGroup(t *testing.T) {
	s := newSink(t)
	rdb, _ := newRedis(t)
	g, err := throttler.NewGroup(rdb, "tenants:", func(string) (throttler.KeyQuota, error) {
		return throttler.KeyQuota{Limit: 10, Interval: time.Minute}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := InstrumentGroup(g, s.providers(WithMaxTenants(1))...); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, tenant string }{{"one", "x"}, {"two", "y"}, {"two", "x"}} {
		th, err := g.For(c.key)
		if err != nil {
			t.Fatal(err)
		}
		if err := th.Wait(throttler.ContextWithTenant(context.Background(), c.tenant)); err != nil {
			t.Fatal(err)
		}
	}
	got := s.collect(t)
	for tenant, want := range map[string]float64{"x": 2, OtherTenant: 1, "y": 0} {
		if v, _ := got.sum(t, "throttler.tenant.admitted", TenantAttribute.String(tenant)); v != want {
			t.Errorf("throttler.tenant.admitted{%s} = %v, want %v", tenant, v, want)
		}
	}
}

// Past the bound, a wait's event still names its tenant: traces are one
// per wait.
func TestTenantOnTraces(t *testing.T) {
	s := newSink(t)
	rdb, _ := newRedis(t)
	th := instrumented(t, s, rdb, "traced", 10, time.Minute, nil, WithMaxTenants(0))
	ctx, span := s.tp.Tracer("test").Start(throttler.ContextWithTenant(context.Background(), "acme"), "caller")
	if err := th.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	span.End()
	ended := s.spans.Ended()
	if len(ended) != 1 || len(ended[0].Events()) != 1 {
		t.Fatalf("%d spans ended, want the caller's with one event", len(ended))
	}
	if v := attrsOf(ended[0].Events()[0].Attributes)[TenantAttribute]; v.AsString() != "acme" {
		t.Errorf("the wait's event has throttler.tenant.id %q, want acme", v.AsString())
	}
	if v, _ := s.collect(t).sum(t, "throttler.tenant.admitted", TenantAttribute.String(OtherTenant)); v != 1 {
		t.Errorf("throttler.tenant.admitted{other} = %v with WithMaxTenants(0), want 1", v)
	}
}

// Tenants asking concurrently: at most max have their own value, and a
// tenant that had its own keeps it.
func TestTenantValuesConcurrent(t *testing.T) {
	tv := tenantValues{max: 10}
	var mu sync.Mutex
	own := map[string]bool{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				tenant := fmt.Sprint("t", (g+i)%40)
				v := tv.valueOf(tenant)
				mu.Lock()
				if v == tenant {
					own[tenant] = true
				} else if own[tenant] {
					t.Errorf("%s had its own value, then %q", tenant, v)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(own) != 10 {
		t.Fatalf("%d tenants had their own value, want 10", len(own))
	}
}
