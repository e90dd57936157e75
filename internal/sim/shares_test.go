package sim

import (
	"strings"
	"testing"
	"time"
)

// calls makes count back-to-back calls of one unit for tenant on replica,
// admitted every gap from at, each begun when the one before began (so
// that depth calls wait at once).
func callsOf(tenant string, replica, depth, count int, at, gap time.Duration) []TenantCall {
	var out []TenantCall
	for i := range count {
		end := at + time.Duration(i)*gap
		out = append(out, TenantCall{Replica: replica, Tenant: tenant, Start: end - time.Duration(depth)*gap, End: end, N: 1, Admitted: true})
	}
	return out
}

func one(string) float64 { return 1 }

// Two tenants backlogged from the start: one gets a tenth of what the
// other gets, which the check reports; at half each, it does not. A
// light tenant's calls are judged by their waits.
func TestShareCheckJudges(t *testing.T) {
	c := ShareCheck{Weight: one, Fraction: 1.0 / 3, Slack: 2, Settle: time.Second, LightWait: time.Second}
	st := []Span{{2 * time.Second, 10 * time.Second}}
	ms := time.Millisecond
	// a: 10 a second, b: 1 a second, both with 3 calls waiting.
	skewed := append(callsOf("a", 0, 3, 120, 0, 100*ms), callsOf("b", 1, 3, 12, 0, time.Second)...)
	read, broken := c.Judge(skewed, st)
	if len(broken) != 1 || !strings.Contains(broken[0], "tenant b") {
		t.Errorf("skewed shares: broken %q", broken)
	}
	if len(read) != 1 || !read[0].Shares[0].Backlogged || !read[0].Shares[1].Backlogged {
		t.Errorf("skewed shares: read %v", read)
	}
	even := append(callsOf("a", 0, 3, 120, 0, 100*ms), callsOf("b", 1, 3, 120, 0, 100*ms)...)
	if _, broken := c.Judge(even, st); len(broken) > 0 {
		t.Errorf("even shares: broken %q", broken)
	}
	// b waits only with one call at a time: not backlogged, not judged
	// by share; a light tenant, judged by its waits.
	light := append(callsOf("a", 0, 3, 120, 0, 100*ms), callsOf("b", 1, 1, 10, 0, time.Second)...)
	if _, broken := c.Judge(light, st); len(broken) > 0 {
		t.Errorf("a light tenant: broken %q", broken)
	}
	slow := append(callsOf("a", 0, 3, 120, 0, 100*ms), callsOf("b", 1, 1, 4, 0, 2*time.Second)...)
	if _, broken := c.Judge(slow, st); len(broken) != 2 || !strings.Contains(broken[0], "light tenant b") {
		t.Errorf("a light tenant waiting 2s: broken %q", broken)
	}
	failed := append(callsOf("a", 0, 3, 120, 0, 100*ms), TenantCall{Tenant: "b", Start: 3 * time.Second, End: 3 * time.Second})
	if _, broken := c.Judge(failed, st); len(broken) != 1 || !strings.Contains(broken[0], "not admitted") {
		t.Errorf("a light tenant's call failed: broken %q", broken)
	}
}

// A tenant backlogged only from the stretch's start (not Settle before),
// or with a gap in its backlog, is not judged; weights scale the share.
func TestShareCheckBacklog(t *testing.T) {
	c := ShareCheck{Weight: one, Fraction: 1.0 / 3, Slack: 2, Settle: time.Second}
	st := []Span{{2 * time.Second, 10 * time.Second}}
	ms := time.Millisecond
	late := append(callsOf("a", 0, 3, 120, 0, 100*ms), callsOf("b", 1, 3, 5, 5*time.Second+100*ms, time.Second)...)
	if read, broken := c.Judge(late, st); len(broken) > 0 || read[0].Shares[1].Backlogged {
		t.Errorf("backlogged late: broken %q, read %v", broken, read)
	}
	gap := append(callsOf("a", 0, 3, 120, 0, 100*ms), callsOf("b", 1, 3, 5, 0, time.Second)...)
	gap = append(gap, callsOf("b", 1, 3, 6, 7*time.Second+500*ms, time.Second)...)
	if read, broken := c.Judge(gap, st); len(broken) > 0 || read[0].Shares[1].Backlogged {
		t.Errorf("a gap in the backlog: broken %q, read %v", broken, read)
	}
	// Weighted 1:3, b's 1 in 6 is a third of its fair 3/4... and less.
	c.Weight = func(tenant string) float64 { return map[string]float64{"a": 1, "b": 3}[tenant] }
	even := append(callsOf("a", 0, 3, 120, 0, 100*ms), callsOf("b", 1, 3, 24, 0, 500*ms)...)
	if _, broken := c.Judge(even, st); len(broken) != 1 || !strings.Contains(broken[0], "tenant b") {
		t.Errorf("weighted 1:3, got 5:1: broken %q", broken)
	}
}

// The stretches lie between the tenants' comings and goings, less the
// settling time at each start, and last at least the least given.
func TestStretches(t *testing.T) {
	s := Scenario{Run: 10 * time.Second, Tenants: []Tenant{{Name: "t0"}, {Name: "flood", Callers: 3, From: 3 * time.Second, To: 9 * time.Second}}}
	got := s.Stretches(0, time.Second, 2*time.Second)
	want := []Span{{time.Second, 3 * time.Second}, {4 * time.Second, 9 * time.Second}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("stretches %v, want %v", got, want)
	}
}

// The tenant draw leaves a third of the seeds with tenants, every replica
// with a steady tenant, and each steady caller with one at every time.
func TestDrawTenants(t *testing.T) {
	with := 0
	for seed := uint64(1); seed <= 3000; seed++ {
		s := Generate(seed)
		if len(s.Tenants) == 0 {
			continue
		}
		with++
		for r := range s.Replicas {
			for g := range s.Goroutines {
				for _, at := range []time.Duration{0, s.Run / 2, s.Run - 1} {
					if s.TenantOf(r, g, at) == "" {
						t.Fatalf("seed %d: r%d's caller %d has no tenant at %s", seed, r, g, at)
					}
				}
			}
		}
	}
	if with < 900 || with > 1200 {
		t.Errorf("%d seeds of 3000 with tenants, want about a third", with)
	}
}

// TestLightSwing: a light tenant whose calls bunch in one window swings
// above its mean by the bunch less the mean; a backlogged tenant's calls
// do not count, nor do calls not admitted.
func TestLightSwing(t *testing.T) {
	ms := time.Millisecond
	var calls []TenantCall
	// L: one call of 1 unit every 100ms over [0, 1s), and 5 of 2 units at 500ms.
	for i := range 10 {
		at := time.Duration(i) * 100 * ms
		calls = append(calls, TenantCall{Tenant: "L", Start: at, End: at, N: 1, Admitted: true})
	}
	for range 5 {
		calls = append(calls, TenantCall{Tenant: "L", Start: 500 * ms, End: 500 * ms, N: 2, Admitted: true})
	}
	calls = append(calls, TenantCall{Tenant: "L", Start: 0, End: 600 * ms, N: 50})
	// F, backlogged: 3 calls waiting at once on one replica.
	for i := range 3 {
		calls = append(calls, TenantCall{Tenant: "F", Start: 0, End: time.Duration(i+1) * 300 * ms, N: 40, Admitted: true})
	}
	// Windows of 200ms: at most 10+2 = 12 units (500ms and the call at
	// 400ms); on average 20 units over 900ms+200ms: 3.6 a window.
	if got := LightSwing(calls, 200*ms); got != 12-3 {
		t.Errorf("LightSwing = %d, want %d", got, 12-3)
	}
	if got := LightSwing(nil, 200*ms); got != 0 {
		t.Errorf("LightSwing(nil) = %d, want 0", got)
	}
}
