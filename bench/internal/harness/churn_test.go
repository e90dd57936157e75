package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler/bench/internal/fakeapi"
)

// The churn's calls: every tenant's calls, Gap apart, on the replicas in
// turn, warm ones over WarmSpan and churning ones from Start over Span,
// in time order.
func TestChurnCalls(t *testing.T) {
	c := TenantChurn{Tenants: 10, Calls: 3, Gap: time.Second, Start: 8 * time.Second, Span: 5 * time.Second, Warm: 4, WarmSpan: 2 * time.Second}
	calls := c.calls(3)
	if len(calls) != (10+4)*3 {
		t.Fatalf("%d calls, want %d", len(calls), 14*3)
	}
	byTenant := map[string][]churnCall{}
	for i, cl := range calls {
		if i > 0 && cl.at < calls[i-1].at {
			t.Fatalf("call %d at %s before the one before it, at %s", i, cl.at, calls[i-1].at)
		}
		byTenant[cl.tenant] = append(byTenant[cl.tenant], cl)
	}
	first := byTenant["churn-0004"]
	if len(first) != 3 || first[0].at != 10*time.Second || first[2].at != 12*time.Second || first[0].replica != 1 || first[1].replica != 2 || first[2].replica != 0 {
		t.Errorf("churn-0004's calls %+v", first)
	}
	if w := byTenant["warm-0002"]; len(w) != 3 || w[0].at != time.Second {
		t.Errorf("warm-0002's calls %+v", w)
	}
	if last := calls[len(calls)-1].at; last != c.lastCall()-c.Span/10 || c.lastCall() != 15*time.Second {
		t.Errorf("last call at %s, lastCall %s", last, c.lastCall())
	}
}

// A churn run's figures: the baseline's medians over the window before
// the churn, the peak, the first samples one and two windows after the
// last churning call at the API, and when memory was back.
func TestChurnFigures(t *testing.T) {
	sc := Scenario{Name: ChurnScenario, Interval: time.Second, Churn: &TenantChurn{Tenants: 2, Calls: 1, Start: 4 * time.Second, Span: time.Second}}
	t0 := time.Now()
	s := func(at time.Duration, used, tens int64) memSample {
		return memSample{at: at, used: used + 1000, clients: 1000, key: used / 10, members: 20 + tens, tens: tens}
	}
	samples := []memSample{
		s(2500*time.Millisecond, 90_000, 5), // before the baseline's window
		s(3000*time.Millisecond, 100_000, 0), s(3500*time.Millisecond, 101_000, 0), s(3900*time.Millisecond, 100_500, 0),
		s(4500*time.Millisecond, 180_000, 60), s(5000*time.Millisecond, 150_000, 80),
		s(6000*time.Millisecond, 120_000, 40), // one window after the last call (5s)
		s(7000*time.Millisecond, 101_500, 3),  // two after: members left
		s(7500*time.Millisecond, 108_000, 0),  // none left, memory not back
		s(8000*time.Millisecond, 100_800, 0),  // back
	}
	arrivals := []fakeapi.Arrival{{At: t0.Add(4200 * time.Millisecond), Tenant: "churn-0000"}, {At: t0.Add(5 * time.Second), Tenant: "churn-0001"}, {At: t0.Add(6 * time.Second), Tenant: steadyName}}
	results := []ReplicaResult{{Tenants: []TenantResult{{Name: "churn", Made: 2, Admitted: 2}, {Name: steadyName, Made: 9, Admitted: 9}}}}
	f := churnFigures(sc, t0, samples, arrivals, results)
	if f.Baseline.DataBytes != 100_500 || f.BaselineSpread != 1000 || f.ToleranceBytes != minChurnTolerance {
		t.Errorf("baseline %+v, spread %d, tolerance %d", f.Baseline, f.BaselineSpread, f.ToleranceBytes)
	}
	if f.Peak.DataBytes != 180_000 || f.Peak.ChurnMembers != 80 || f.LastCallS != 5 || f.Made != 2 || f.Admitted != 2 {
		t.Errorf("peak %+v, last call %gs, %d/%d admitted", f.Peak, f.LastCallS, f.Admitted, f.Made)
	}
	if f.After1W == nil || f.After1W.DataBytes != 120_000 || f.After2W == nil || f.After2W.ChurnMembers != 3 {
		t.Errorf("after one window %+v, two %+v", f.After1W, f.After2W)
	}
	if f.BackAfterS == nil || *f.BackAfterS != 3 {
		t.Errorf("back after %v, want 3s", f.BackAfterS)
	}
	targets := churnTargets(TenantTarget{Run: 1, Impl: "throttler", Scenario: ChurnScenario}, f)
	if len(targets) != 2 || targets[0].Value != 1000 || targets[0].Limit != minChurnTolerance || targets[1].Value != 3 || targets[1].Limit != 0 {
		t.Fatalf("targets %+v", targets)
	}
	for i := range targets {
		targets[i].Met = targets[i].Value <= targets[i].Limit
	}
	var b strings.Builder
	writeTenantTargets(&b, targets, false)
	for _, line := range []string{
		"| tenants-churn: used_memory less the clients' two windows after the last churning call, over the baseline | throttler | — | 1000 B | 4096 B | yes |",
		"| tenants-churn: churning tenants' members left in the key two windows after their last call | throttler | — | 3 | 0 | **no** |",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("targets table lacks %q:\n%s", line, b.String())
		}
	}
	b.Reset()
	writeChurn(&b, []Row{{Scenario: ChurnScenario, Impl: "throttler", Tenants: &TenantsRow{Churn: f}}}, false)
	if !strings.Contains(b.String(), "| tenants-churn | throttler | two windows after the last call | 7.00 | 102500 | 1000 | 101500 | +1000 |") {
		t.Errorf("churn table:\n%s", b.String())
	}
}

// TestSmokeChurn runs tenants-churn shrunk to 2 processes, 4 warm tenants
// and 20 churning ones of 2 calls each, over 1s: every churning call is
// admitted and reaches the API, and the figures are filled in from
// Redis's memory, read throughout.
func TestSmokeChurn(t *testing.T) {
	rep, row := smoke(t, ChurnScenario, nil, func(sc *Scenario) {
		sc.Procs = 2
		sc.Churn = &TenantChurn{Tenants: 20, Calls: 2, Gap: 200 * time.Millisecond, Start: 2 * time.Second, Span: time.Second, Warm: 4, WarmSpan: 300 * time.Millisecond}
		sc.Warmup, sc.Duration = sc.Churn.Start, sc.Churn.lastCall()+2500*time.Millisecond
	})
	f := row.Tenants.Churn
	switch {
	case f == nil:
		t.Fatalf("row %+v, want the churn's figures", row)
	case f.Made != 40 || f.Admitted != 40:
		t.Fatalf("%d of %d churning calls admitted, want 40", f.Admitted, f.Made)
	case f.Samples < 40 || f.Baseline.UsedMemory == 0 || f.Peak.ChurnMembers == 0 || f.After2W == nil:
		t.Errorf("%d samples: baseline %+v, peak %+v, two windows after %v", f.Samples, f.Baseline, f.Peak, f.After2W)
	case f.LastCallS < 2 || f.LastCallS > 4:
		t.Errorf("last churning call at %gs", f.LastCallS)
	}
	if md := rep.Markdown(); !strings.Contains(md, "| tenants-churn | throttler | two windows after the last call |") {
		t.Errorf("no churn table in:\n%s", md)
	}
}
