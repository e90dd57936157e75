package throttler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Stats keeps each tenant's admitted waits apart, in units, with their
// wait; calls without a tenant, AllowN calls and waits turned away count
// for no tenant; the Observer's WaitInfo names each wait's tenant.
func TestTenantStatsKeepTenantsApart(t *testing.T) {
	var mu sync.Mutex
	var tenants []string
	th := mustNew(t, miniDialer(t, miniredis.RunT(t))(), "quota", 10, time.Minute, WithObserver(Observer{
		Waited: func(_ context.Context, w WaitInfo) { mu.Lock(); tenants = append(tenants, w.Tenant); mu.Unlock() },
	}))
	bg := context.Background()
	a, b := ContextWithTenant(bg, "a"), ContextWithTenant(bg, "b")
	for _, call := range []func() error{
		func() error { return th.WaitN(a, 2) },
		func() error { return th.Wait(a) },
		func() error { return th.Wait(b) },
		func() error { return th.Wait(bg) },
		func() error { return th.Wait(ContextWithTenant(bg, "")) },
		func() error { _, err := th.Allow(a); return err },
		func() error { p, err := th.Acquire(b, 3); p.Done(); return err },
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	// Over the limit now: a wait of b past its deadline is turned away.
	short, cancel := context.WithTimeout(b, 100*time.Millisecond)
	defer cancel()
	if err := th.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait over the limit: %v", err)
	}
	s := th.Stats()
	if s.Admitted != 10 || s.Waits != 6 {
		t.Fatalf("Stats admitted %d in %d waits, want 10 in 6", s.Admitted, s.Waits)
	}
	got := map[string][2]uint64{}
	var waited time.Duration
	for tenant, c := range s.Tenants.ByTenant {
		got[tenant] = [2]uint64{c.Admitted, c.Waits}
		waited += c.Waited
	}
	if want := map[string][2]uint64{"a": {3, 2}, "b": {4, 2}}; !maps.Equal(got, want) {
		t.Fatalf("Tenants.ByTenant (units, waits) = %v, want %v", got, want)
	}
	if s.Tenants.Other != (TenantCounts{}) {
		t.Fatalf("Tenants.Other = %+v, want zero", s.Tenants.Other)
	}
	if waited <= 0 || waited > s.Waited {
		t.Fatalf("tenants waited %s, of %s in all", waited, s.Waited)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a", "a", "b", "", "", "b", "b"}; !slices.Equal(tenants, want) {
		t.Fatalf("WaitInfo.Tenant of the waits: %q, want %q", tenants, want)
	}
}

// A Transport's Tenant names the tenant of its requests' waits, in Stats
// and in the WaitInfo the Observer gets.
func TestTenantStatsOfATransport(t *testing.T) {
	var seen []string
	var mu sync.Mutex
	th := mustNew(t, miniDialer(t, miniredis.RunT(t))(), "quota", 100, time.Second, WithObserver(Observer{
		Waited: func(_ context.Context, w WaitInfo) { mu.Lock(); seen = append(seen, w.Tenant); mu.Unlock() },
	}))
	c := &http.Client{Transport: &Transport{
		Route:  th.Route(),
		Tenant: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		Base:   rtFunc(okBody),
	}}
	for _, tenant := range []string{"x", "y", "x"} {
		req, _ := http.NewRequest("GET", "http://api.example/", nil)
		req.Header.Set("X-Tenant", tenant)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	by := th.Stats().Tenants.ByTenant
	if by["x"].Waits != 2 || by["y"].Waits != 1 || len(by) != 2 {
		t.Fatalf("Tenants.ByTenant = %+v, want x: 2 waits, y: 1", by)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"x", "y", "x"}; !slices.Equal(seen, want) {
		t.Fatalf("WaitInfo.Tenant %q, want %q", seen, want)
	}
}

// sumOf is what ts counts over every tenant, Other included.
func sumOf(ts TenantStats) TenantCounts {
	sum := ts.Other
	for _, c := range ts.ByTenant {
		sum.merge(c)
	}
	return sum
}

// The table holds 100 tenants: the 101st counts in Other until a snapshot
// has shown the least recently active tenant's counts, whose place it then
// takes, its counts moving to Other; a tenant active since the snapshot
// keeps its place.
func TestTenantStatsBound(t *testing.T) {
	var tt tenantTable
	name := func(i int) string { return fmt.Sprintf("t%03d", i) }
	for i := range maxTenantStats + 1 {
		tt.admitted(name(i), 2, time.Second, time.Time{})
	}
	s := tt.snapshot(time.Time{})
	if len(s.ByTenant) != maxTenantStats {
		t.Fatalf("%d tenants in ByTenant, want %d", len(s.ByTenant), maxTenantStats)
	}
	if _, ok := s.ByTenant[name(maxTenantStats)]; ok || s.Other != (TenantCounts{2, 1, time.Second, time.Time{}}) {
		t.Fatalf("the 101st tenant: in ByTenant %v, Other %+v; want Other only", ok, s.Other)
	}
	// Since the snapshot: t000 is active again, t001 the least recently
	// active. The 101st takes t001's place; the next takes t002's.
	took := time.Now() // when the 101st takes a place: its counts' Since
	tt.admitted(name(0), 1, 0, time.Time{})
	tt.admitted(name(maxTenantStats), 5, 0, took)
	tt.admitted("late", 7, 0, time.Time{})
	s = tt.snapshot(time.Time{})
	for tenant, want := range map[string]bool{name(0): true, name(1): false, name(2): false, name(maxTenantStats): true, "late": true} {
		if _, ok := s.ByTenant[tenant]; ok != want {
			t.Errorf("%s in ByTenant: %v, want %v", tenant, ok, want)
		}
	}
	if got := s.ByTenant[name(0)]; got != (TenantCounts{3, 2, time.Second, time.Time{}}) {
		t.Errorf("t000 = %+v, want its counts kept", got)
	}
	if got := s.ByTenant[name(maxTenantStats)]; got != (TenantCounts{5, 1, 0, took}) {
		t.Errorf("the 101st's own counts = %+v, want those since it took a place, at %v", got, took)
	}
	if want := (TenantCounts{2 + 2 + 2, 3, 3 * time.Second, time.Time{}}); s.Other != want {
		t.Errorf("Other = %+v, want the 101st's first wait and t001's and t002's counts, %+v", s.Other, want)
	}
	if want := (TenantCounts{2*(maxTenantStats+1) + 1 + 5 + 7, maxTenantStats + 4, (maxTenantStats + 1) * time.Second, time.Time{}}); sumOf(s) != want {
		t.Errorf("counts over every tenant = %+v, want %+v", sumOf(s), want)
	}
	// Every tenant active again since the snapshot: nothing gives way.
	for tenant := range s.ByTenant {
		tt.admitted(tenant, 1, 0, time.Time{})
	}
	tt.admitted("another", 1, 0, time.Time{})
	if s2 := tt.snapshot(time.Time{}); len(s2.ByTenant) != maxTenantStats || s2.Other.Waits != 4 || !maps.EqualFunc(s.ByTenant, s2.ByTenant, func(c, d TenantCounts) bool { return d.Waits == c.Waits+1 }) {
		t.Errorf("a tenant took the place of one active since the last snapshot: %d tenants, Other %+v", len(s2.ByTenant), s2.Other)
	}
}

// A tenant none of whose waits was admitted for longer than the idle time
// (the Throttler's longest window) leaves the table at the snapshot that
// shows it, its counts to Other; one admitted since stays, and so does
// every tenant while the table has no idle time.
func TestTenantStatsIdleLeave(t *testing.T) {
	t0 := time.Now()
	tt := tenantTable{idle: time.Second}
	tt.admitted("gone", 2, time.Millisecond, t0)
	tt.admitted("back", 1, 0, t0)
	tt.admitted("back", 1, 0, t0.Add(1500*time.Millisecond))
	s := tt.snapshot(t0.Add(2 * time.Second))
	if len(s.ByTenant) != 2 || s.Other != (TenantCounts{}) {
		t.Fatalf("the snapshot that lets an idle tenant go shows %+v, Other %+v; want both tenants, Other empty", s.ByTenant, s.Other)
	}
	if _, ok := tt.entries["gone"]; ok || len(tt.entries) != 1 {
		t.Fatalf("after the snapshot the table holds %d tenants (gone: %v), want only the one admitted within the idle time", len(tt.entries), ok)
	}
	s = tt.snapshot(t0.Add(2 * time.Second))
	if _, ok := s.ByTenant["gone"]; ok || s.Other != (TenantCounts{2, 1, time.Millisecond, time.Time{}}) || s.ByTenant["back"].Waits != 2 {
		t.Fatalf("the next snapshot: %+v, Other %+v; want back's 2 waits, and gone's in Other", s.ByTenant, s.Other)
	}
	tt.snapshot(t0.Add(3 * time.Second))
	if len(tt.entries) != 0 || tt.other.Waits != 3 {
		t.Fatalf("once every tenant is idle the table holds %d, Other %+v", len(tt.entries), tt.other)
	}
	tt.admitted("gone", 1, 0, t0.Add(3*time.Second))
	if s := tt.snapshot(t0.Add(3 * time.Second)); s.ByTenant["gone"] != (TenantCounts{1, 1, 0, t0.Add(3 * time.Second)}) || s.Other.Waits != 3 {
		t.Fatalf("a tenant that came back: %+v, Other %+v; want its counts from zero", s.ByTenant, s.Other)
	}
	keep := tenantTable{}
	keep.admitted("a", 1, 0, t0)
	keep.snapshot(t0.Add(time.Hour))
	if len(keep.entries) != 1 {
		t.Fatalf("without an idle time the table let a tenant go")
	}
}

// A tenant's Since stays while it keeps its place, whatever its
// admissions, and is later once it left and came back, between two
// snapshots as across them: a reader that keeps counters can tell a
// restart from counts that only grew. Other's stays zero.
func TestTenantStatsSinceTellsARestart(t *testing.T) {
	t0 := time.Now()
	tt := tenantTable{idle: time.Second}
	tt.admitted("a", 1, 0, t0)
	tt.admitted("a", 1, 0, t0.Add(900*time.Millisecond))
	s := tt.snapshot(t0.Add(time.Second))
	if got := s.ByTenant["a"]; got.Since != t0 || got.Waits != 2 {
		t.Fatalf("a = %+v, want 2 waits since its first, %v", got, t0)
	}
	// a is idle past the table's idle time: the next snapshot lets it
	// go; it comes back before the one after, whose counts are new.
	tt.snapshot(t0.Add(2 * time.Second))
	back := t0.Add(2500 * time.Millisecond)
	tt.admitted("a", 1, 0, back)
	s = tt.snapshot(back)
	if got := s.ByTenant["a"]; got.Since != back || got.Waits != 1 {
		t.Fatalf("a, back = %+v, want 1 wait since %v", got, back)
	}
	if !s.Other.Since.IsZero() || s.Other.Waits != 2 {
		t.Fatalf("Other = %+v, want a's first 2 waits and no Since", s.Other)
	}
}

// Through Stats: an idle tenant of a Throttler leaves after its window.
func TestTenantStatsIdleLeaveAfterTheWindow(t *testing.T) {
	th := mustNew(t, miniDialer(t, miniredis.RunT(t))(), "quota", 10, 100*time.Millisecond)
	if err := th.Wait(ContextWithTenant(context.Background(), "a")); err != nil {
		t.Fatal(err)
	}
	if s := th.Stats(); s.Tenants.ByTenant["a"].Waits != 1 {
		t.Fatalf("Tenants = %+v, want a's wait", s.Tenants)
	}
	deadline := time.Now().Add(5 * time.Second)
	for th.Stats(); len(th.Stats().Tenants.ByTenant) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("an idle tenant still in Stats 5s after a window of 100ms")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := th.Stats(); s.Tenants.Other.Waits != 1 {
		t.Fatalf("Tenants.Other = %+v, want a's wait", s.Tenants.Other)
	}
}

// Many tenants admitted concurrently, with snapshots meanwhile: the table
// never holds more than its bound, and every wait counts once.
func TestTenantStatsConcurrent(t *testing.T) {
	var tt tenantTable
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				tt.admitted(fmt.Sprint("tenant-", (g*each+i)%(3*maxTenantStats)), 1, time.Millisecond, time.Time{})
			}
		})
	}
	stop := make(chan struct{})
	var snaps sync.WaitGroup
	snaps.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if s := tt.snapshot(time.Time{}); len(s.ByTenant) > maxTenantStats {
				t.Errorf("%d tenants in ByTenant", len(s.ByTenant))
				return
			}
		}
	})
	wg.Wait()
	close(stop)
	snaps.Wait()
	s := tt.snapshot(time.Time{})
	if want := (TenantCounts{goroutines * each, goroutines * each, goroutines * each * time.Millisecond, time.Time{}}); sumOf(s) != want {
		t.Fatalf("counts over every tenant = %+v, want %+v", sumOf(s), want)
	}
	if n := len(tt.entries); n > maxTenantStats {
		t.Fatalf("the table holds %d tenants", n)
	}
}

// A wait without a tenant leaves the table alone and allocates nothing
// for it; a wait of a tenant that has its place allocates nothing.
func TestTenantStatsCostNothingWithoutTenants(t *testing.T) {
	var m meter
	bg := context.Background()
	start := time.Now()
	if n := testing.AllocsPerRun(100, func() { m.wait(bg, 1, start, start.Add(time.Millisecond), nil) }); n != 0 {
		t.Errorf("a wait without a tenant allocated %.1f times", n)
	}
	if m.tenants.entries != nil {
		t.Fatalf("waits without a tenant made the table")
	}
	ctx := ContextWithTenant(bg, "a")
	m.wait(ctx, 1, start, start, nil)
	if n := testing.AllocsPerRun(100, func() { m.wait(ctx, 1, start, start.Add(time.Millisecond), nil) }); n != 0 {
		t.Errorf("a wait of a tenant in the table allocated %.1f times", n)
	}
	if s := m.tenants.snapshot(time.Time{}); s.ByTenant["a"].Waits != 102 || len(s.ByTenant) != 1 {
		t.Fatalf("Tenants = %+v, want a's 102 waits", s)
	}
}
