package harness

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler/bench/internal/fakeapi"
)

// tenantFigures counts each tenant's calls at the API in each period
// after the warm-up, gives the flooding tenants their weights' targets
// (not the light one), and sums the replicas' counts and waits.
func TestTenantFigures(t *testing.T) {
	sc := Scenario{Kind: KindTenants, Procs: 2, Warmup: time.Second, Period: 2 * time.Second, Duration: 5500 * time.Millisecond,
		Tenants: []TenantLoad{{Name: "A", Goroutines: 3, Weight: 2}, {Name: "B", Goroutines: 3, Replicas: 1}, {Name: "L", Rate: 2}}}
	t0 := time.Unix(1000, 0)
	var arrivals []fakeapi.Arrival
	add := func(tenant string, at time.Duration, n int) {
		for range n {
			arrivals = append(arrivals, fakeapi.Arrival{At: t0.Add(at), Tenant: tenant})
		}
	}
	add("A", 500*time.Millisecond, 50) // the warm-up: not counted
	add("A", 1500*time.Millisecond, 6)
	add("B", 1500*time.Millisecond, 3)
	add("L", 2*time.Second, 1)
	add("A", 3500*time.Millisecond, 5)
	add("B", 3500*time.Millisecond, 5)
	add("B", 5200*time.Millisecond, 9) // after the last whole period
	results := []ReplicaResult{
		{Index: 0, Tenants: []TenantResult{{Name: "A", Made: 10, Admitted: 9, Unfinished: 1, WaitNs: []int64{1e6, 3e6}},
			{Name: "L", Made: 4, Admitted: 4, WaitNs: []int64{2e6}}}},
		{Index: 1, Tenants: []TenantResult{{Name: "A", Made: 5, Admitted: 5, WaitNs: []int64{2e6}}}},
	}
	f := tenantFigures(sc, t0, results, arrivals)
	if f.Periods != 2 || len(f.Tenants) != 3 {
		t.Fatalf("%d periods, %d tenants: %+v", f.Periods, len(f.Tenants), f)
	}
	a, b, l := f.Tenants[0], f.Tenants[1], f.Tenants[2]
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	switch {
	case !near(a.Shares[0], 0.6) || !near(a.Shares[1], 0.5) || !near(b.Shares[0], 0.3) || !near(l.Shares[0], 0.1):
		t.Errorf("shares A %v, B %v, L %v", a.Shares, b.Shares, l.Shares)
	case a.Target == nil || !near(*a.Target, 2.0/3) || b.Target == nil || !near(*b.Target, 1.0/3) || l.Target != nil:
		t.Errorf("targets A %v, B %v, L %v", a.Target, b.Target, l.Target)
	case f.ShareGap == nil || !near(*f.ShareGap, 1.0/6):
		t.Errorf("share gap %v, want 1/6 (the second period)", f.ShareGap)
	case a.Made != 15 || a.Admitted != 14 || a.Unfinished != 1 || a.Measured != 3 || a.WaitP50Ms != 2 || a.WaitMaxMs != 3 || a.Replicas != 2 || b.Replicas != 1:
		t.Errorf("A's counts %+v, B's replicas %d", a, b.Replicas)
	case !near(b.PerSec, 17.0/4.5) || a.Weight != 2 || b.Weight != 1:
		t.Errorf("B: %g/s at the API, weights %g, %g", b.PerSec, a.Weight, b.Weight)
	}
}

// A run too short for a whole period counts its shares over the time
// after the warm-up.
func TestSharePeriodsShortRun(t *testing.T) {
	sc := Scenario{Warmup: time.Second, Period: 5 * time.Second, Duration: 3 * time.Second}
	if p := sharePeriods(sc); len(p) != 1 || p[0] != [2]time.Duration{time.Second, 3 * time.Second} {
		t.Errorf("periods %v", p)
	}
}

// tenantTargets pairs each run's tenants-flood with its tenants-calm and
// its tenants-skewed with its tenants-skewed-plain, and holds the shares
// of the tagged runs to 5 points.
func TestTenantTargets(t *testing.T) {
	light := func(p99 float64) []TenantFigures {
		return []TenantFigures{{Name: "A", Goroutines: 30, WaitP99Ms: 2000}, {Name: "B", Rate: 2, WaitP99Ms: p99, Made: 10, Admitted: 10}}
	}
	gap, wide := 0.02, 0.3
	rows := []Row{
		{Scenario: tenantsFlood, Impl: "throttler", Run: 1, Tenants: &TenantsRow{Tenants: light(3)}},
		{Scenario: tenantsCalm, Impl: "throttler", Run: 1, Tenants: &TenantsRow{Tenants: light(1)[1:]}},
		{Scenario: tenantsFlood, Impl: "throttler", Run: 2, Tenants: &TenantsRow{Tenants: light(1.5)}},
		{Scenario: tenantsCalm, Impl: "throttler", Run: 2, Tenants: &TenantsRow{Tenants: light(1)[1:]}},
		{Scenario: tenantsSkewed, Impl: "throttler", Run: 1, RoundTripsPerAdm: 0.6, CommandsPerAdm: 3, Tenants: &TenantsRow{ShareGap: &gap}},
		{Scenario: tenantsPlain, Impl: "throttler", Run: 1, RoundTripsPerAdm: 0.5, CommandsPerAdm: 1.5, Tenants: &TenantsRow{Untagged: true, ShareGap: &wide}},
	}
	got := tenantTargets(rows)
	want := []struct {
		scenario string
		run      int
		value    float64
		met      bool
	}{
		{tenantsFlood, 1, 3, false}, {tenantsFlood, 2, 1.5, true}, // B's p99 over its calm one
		{tenantsSkewed, 1, 0.02, true}, {tenantsSkewed, 1, 1.2, true}, {tenantsSkewed, 1, 2, false}, // shares, round trips, commands
	}
	if len(got) != len(want) {
		t.Fatalf("%d targets, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if g := got[i]; g.Scenario != w.scenario || g.Run != w.run || math.Abs(g.Value-w.value) > 1e-9 || g.Met != w.met {
			t.Errorf("target %d: %+v, want %+v", i, g, w)
		}
	}
	var b strings.Builder
	writeTenantTargets(&b, got, true)
	for _, line := range []string{
		"| tenants-flood: B's wait p99, over its p99 without the flood | throttler | 1 | tenants-calm | 3.00x | 2x | **no** | 3.00ms against 1.00ms;",
		"| tenants-skewed: largest gap between a flooding tenant's share and its weight's, any period | throttler | 1 | — | 2.0 pts | 5 pts | yes |",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("targets table lacks %q:\n%s", line, b.String())
		}
	}
}

// The report writes a tenants row's tables: a line per tenant and one
// with the run's totals.
func TestTenantOutputs(t *testing.T) {
	u, mx, rej, target, gap := 0.9, 100, 0, 0.5, 0.01
	rep := &Report{
		Meta: Meta{OS: "linux/amd64", CPUs: 2, RedisVersion: "7", GoVersion: "go1", BufferMs: 50},
		Rows: []Row{{Scenario: "tenants-weighted", Impl: "throttler", Limit: 100, Utilization: &u, MaxInWindow: &mx, StrictRejects: &rej,
			RoundTripsPerAdm: 0.7, CommandsPerAdm: 7.2, Tenants: &TenantsRow{PeriodS: 5, Periods: 2, ShareGap: &gap, Tenants: []TenantFigures{
				{Name: "A", Weight: 2, Replicas: 3, Goroutines: 30, Made: 700, Admitted: 610, Unfinished: 90, WaitP50Ms: 2100, WaitP99Ms: 3150, WaitMaxMs: 3150,
					PerSec: 48.9, Shares: []float64{0.507, 0.504}, Target: &target},
				{Name: "B", Weight: 1, Replicas: 3, Rate: 2, Made: 42, Admitted: 42, WaitP50Ms: 1.5, WaitP99Ms: 17, WaitMaxMs: 17, PerSec: 6, Shares: []float64{0.07, 0.06}},
			}}}},
	}
	checkOutputs(t, rep)
	md := rep.Markdown()
	for _, want := range []string{
		"| tenants-weighted | throttler | A | 2 | 3 | 30 goroutines | 700 | 610 | 90 | 2.10s | 3.15s | 3.15s | 48.9 | 50.7%, 50.4% | 50.0% |",
		"| tenants-weighted | throttler | B | 1 | 3 | 2/s open loop | 42 | 42 | 0 | 1.50ms | 17ms | 17ms | 6.0 | 7.0%, 6.0% | — |",
		"| tenants-weighted | throttler | ContextWithTenant | 2 x 5s | 90.0% | 100 | 0 | 0.70 | 7.20 | 0.0 | 1.0 pts |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestSmokeTenants runs tenants-flood, shrunk to 2 processes, tenant A's
// 5 goroutines on each and B's calls at 2/s on each, on 20 per 1s for
// 2.5s: every call of B's is admitted, the limit holds at the API, and
// the tenants' figures are filled in from the replicas and the API. (At
// 4/s on each, B asked for 40% of the limit, was no light tenant, waited
// up to 1.7s, and its last calls were still queued as the run ended: 4
// runs of 8 failed so on e6290ab, 1 of 6 on 0ba88b4. At 2/s, 20% of the
// limit as tenants-flood's B and C are 6%, 10 runs of 10 passed.)
func TestSmokeTenants(t *testing.T) {
	rep, row := smoke(t, tenantsFlood, nil, func(sc *Scenario) {
		sc.Procs, sc.Limit, sc.Duration, sc.Warmup, sc.Period = 2, 20, 2500*time.Millisecond, 500*time.Millisecond, time.Second
		sc.Tenants = []TenantLoad{{Name: "A", Goroutines: 5}, {Name: "B", Rate: 2}}
	})
	f := row.Tenants
	if f == nil || len(f.Tenants) != 2 {
		t.Fatalf("row %+v, want the tenants' figures", row)
	}
	a, b := f.Tenants[0], f.Tenants[1]
	switch {
	case a.Admitted == 0 || b.Made == 0 || b.Measured == 0:
		t.Fatalf("A: %d admitted; B: %d made, %d measured", a.Admitted, b.Made, b.Measured)
	case row.Errors != 0 || row.APIErrors != 0:
		t.Fatalf("%d wait errors, %d API errors: %s", row.Errors, row.APIErrors, row.FirstError)
	case b.Admitted != b.Made:
		t.Errorf("B: %d of %d calls admitted", b.Admitted, b.Made)
	case int64(row.APICalls) != row.Admitted || a.Admitted+b.Admitted != row.Admitted:
		t.Errorf("%d calls reached the API, %d admitted: A %d, B %d", row.APICalls, row.Admitted, a.Admitted, b.Admitted)
	case f.Periods != 2 || len(a.Shares) != 2 || a.Shares[0]+b.Shares[0] < 0.999 || a.PerSec == 0:
		t.Errorf("shares A %v, B %v over %d periods; A %g/s", a.Shares, b.Shares, f.Periods, a.PerSec)
	case *row.MaxInWindow > row.Limit || *row.StrictRejects != 0:
		t.Errorf("max in window %d (limit %d), strict rejects %d", *row.MaxInWindow, row.Limit, *row.StrictRejects)
	case len(row.Stats) != 2 || len(row.Stats[0]) == 0:
		t.Errorf("library Stats of %d replicas", len(row.Stats))
	}
	if md := rep.Markdown(); !strings.Contains(md, "| tenants-flood | throttler | B | 1 | 2 | 2/s open loop |") {
		t.Errorf("no tenants table in:\n%s", md)
	}
}
