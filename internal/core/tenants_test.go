package core

import (
	"math"
	"slices"
	"testing"
	"time"
)

func use(tag string, units int, waited bool) TenantUse {
	u := TenantUse{Tag: tag, Weight: 1, Units: units}
	if waited {
		u.Waited = 1
	}
	return u
}

// The backlogged tenants share what the others leave of the limit, less
// the spare; a tenant alone, or tenants none of which waits, get no cap.
func TestFairLevel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		uses  []TenantUse
		level float64
		ok    bool
	}{
		{"alone", []TenantUse{use("a", 100, true)}, 0, false},
		{"none backlogged", []TenantUse{use("a", 50, false), use("b", 40, false)}, 0, false},
		{"flood and two light tenants", []TenantUse{use("a", 88, true), use("b", 6, false), use("c", 6, false)}, 86, true},
		{"all backlogged", []TenantUse{use("a", 50, true), use("b", 17, true), use("c", 30, true)}, 98.0 / 3, true},
		{"weighted", []TenantUse{{"a", 2, 60, 1}, {"b", 1, 20, 1}, {"c", 1, 20, 1}}, 24.5, true},
		{"idle tenants do not count", []TenantUse{use("a", 90, true), use("b", 0, false)}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			level, ok := FairLevel(tc.uses, 100, 0.02, 0)
			if ok != tc.ok || math.Abs(level-tc.level) > 0.01 {
				t.Fatalf("FairLevel = %g, %v; want %g, %v", level, ok, tc.level, tc.ok)
			}
		})
	}
}

// CapSlot finds the first score whose neighbourhood leaves room under the
// cap, and CapHolds agrees with it.
func TestCapSlot(t *testing.T) {
	const w = 100
	scores := []int64{10, 20, 30, 40, 250}
	for _, tc := range []struct {
		floor int64
		cap   int
		want  int64
	}{
		{50, 5, 50},   // (-50, 150) holds 4
		{50, 4, 110},  // 10 leaves at 110: (10, 210) holds 3
		{50, 2, 130},  // 10, 20 and 30 leave by 130: (30, 230) holds 40
		{200, 1, 350}, // (100, 300) holds 250: it leaves at 350
	} {
		got := CapSlot(scores, tc.floor, w, tc.cap, 1)
		if got != tc.want {
			t.Errorf("CapSlot(floor %d, cap %d) = %d, want %d", tc.floor, tc.cap, got, tc.want)
		}
		with := append(slices.Clone(scores), got)
		slices.Sort(with)
		if !CapHolds(with, got, w, tc.cap) {
			t.Errorf("CapHolds at CapSlot's %d (cap %d) is false", got, tc.cap)
		}
	}
}

// A capped tenant's request waits for the slot its cap leaves and claims
// little ahead, without holding back another tenant's request behind it;
// a tenant past its room in the round keeps its next request queued.
func TestPlanCappedTenant(t *testing.T) {
	c := testConfig(100, time.Second, time.Second)
	in := planAt(100)
	in.Known = Known{Tenants: TenantShares{
		Ahead: 20_000, Level: 10, Until: in.Now.Add(time.Second),
		Capped: map[string]bool{"a": true},
		Use:    map[string]int{"a": 8},
		Next:   map[string]int64{"a": 1_500_000},
	}}
	reqs := []Request{{N: 1, Prio: Normal, Tenant: "a"}, {N: 1, Prio: Normal, Tenant: "b"}}
	p := Plan(c, in, reqs, PlanOut{})
	if p.Each[0].Action != Keep || p.Each[1].Action != Take || p.Each[1].Score != 1_001_000 {
		t.Fatalf("a's request %+v, b's %+v: want a's kept for its slot 0.5s on, b's claimed now", p.Each[0], p.Each[1])
	}
	p = Plan(c, in, reqs[:1], PlanOut{})
	if want := 480 * time.Millisecond; p.Each[0].Action != Keep || p.Sleep != want {
		t.Fatalf("a alone: %+v, sleep %s; want kept, sleeping until its slot comes within reach (%s)", p.Each[0], p.Sleep, want)
	}
	in.Known.Tenants.Next["a"] = 1_010_000 // within reach
	reqs = []Request{{N: 1, Prio: Normal, Tenant: "a"}, {N: 1, Prio: Normal, Tenant: "a"}, {N: 1, Prio: Normal, Tenant: "a"}}
	p = Plan(c, in, reqs, PlanOut{})
	// a's room: cap 10 less 8 held.
	if p.Each[0].Action != Take || p.Each[0].Score != 1_010_000 || p.Each[1].Action != Take || p.Each[2].Action != Keep {
		t.Fatalf("a's requests %+v: want two claimed at its slot, the third kept", p.Each)
	}
}
