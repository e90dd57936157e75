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
		{"weighted", []TenantUse{{Tag: "a", Weight: 2, Units: 60, Waited: 1}, {Tag: "b", Weight: 1, Units: 20, Waited: 1}, {Tag: "c", Weight: 1, Units: 20, Waited: 1}}, 24.5, true},
		{"idle tenants do not count", []TenantUse{use("a", 90, true), use("b", 0, false)}, 0, false},
		// b's calls wait in the process that scans, none in the window:
		// a is not alone (seed 812), and leaves the spare and the light
		// tenants' most (none) to it.
		{"a tenant queued here that holds nothing", []TenantUse{use("a", 90, true), {Tag: "b", Weight: 1, Queued: true}}, 98, true},
		{"a tenant queued here alone", []TenantUse{{Tag: "b", Weight: 1, Queued: true}}, 0, false},
		// The calls of no tenant are held, as a light tenant's are; they
		// are not a tenant.
		{"calls of no tenant", []TenantUse{use("", 18, false), use("a", 40, true), use("b", 40, true)}, 40, true},
		{"calls of no tenant and one tenant", []TenantUse{use("", 18, false), use("a", 80, true)}, 0, false},
		// c left: its calls, flagged as waited, leave the window one by
		// one, and nobody takes the room they leave. Short of its share
		// at two scans, with room, it counts as holding what it holds: a
		// and b split the rest.
		{"a backlogged tenant that left", []TenantUse{use("a", 33, true), use("b", 32, true), use("c", 10, true)}, 44, true},
		{"a backlogged tenant halfway", []TenantUse{use("a", 33, true), use("b", 32, true), use("c", 17, true)}, 40.5, true},
		// Short by more than the room holds of what it lacks: it may be
		// taking the room as it frees, and keeps its weight.
		{"a tenant short, with little room", []TenantUse{use("a", 38, true), use("b", 38, true), use("c", 17, true)}, 98.0 / 3, true},
		// c just came: the window is full, and it finds no room yet. It
		// keeps its weight, and the caps of a and b make room for it.
		{"a tenant that just came", []TenantUse{use("a", 49, true), use("b", 47, true), use("c", 1, true)}, 98.0 / 3, true},
		// In turn: c and d are below half the share (12.25); once they
		// count as held, b is below half the higher share (48), with
		// room for that; a alone is left.
		{"in turn", []TenantUse{use("a", 50, true), use("b", 14, true), use("c", 1, true), use("d", 1, true)}, 82, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Two scans that see the same: a tenant short at both asks
			// for less.
			_, mem, _ := FairLevel(tc.uses, 100, 0.02, 0, math.Inf(1), FairMemory{})
			level, _, ok := FairLevel(tc.uses, 100, 0.02, 0, math.Inf(1), mem)
			if ok != tc.ok || math.Abs(level-tc.level) > 0.01 {
				t.Fatalf("FairLevel = %g, %v; want %g, %v", level, ok, tc.level, tc.ok)
			}
		})
	}
}

// A tenant none of whose calls waited behind its own, but that holds more
// than the level the others are held to, counts as backlogged (heavy), at
// that scan and the next while its calls come; a light tenant below the
// level does not.
func TestFairLevelHeavy(t *testing.T) {
	// 100 units: flood, backlogged, holds 20; t0 (one caller per
	// replica) 70; light 5. Without the rule: t0 and light keep theirs,
	// and flood gets 98-75 = 23.
	uses := []TenantUse{use("flood", 20, true), use("t0", 70, false), use("light", 5, false)}
	level, mem, ok := FairLevel(uses, 100, 0.02, 0, math.Inf(1), FairMemory{})
	if want := (98.0 - 5) / 2; !ok || math.Abs(level-want) > 0.01 {
		t.Fatalf("FairLevel = %g (ok %v), want %g: flood and t0 share what light leaves", level, ok, want)
	}
	if _, heavy := mem.Heavy["t0"]; !heavy || len(mem.Heavy) != 1 {
		t.Fatalf("heavy %v, want t0 alone", mem.Heavy)
	}
	var k Known
	k.LearnTenants(uses, 0, 100, 0.02, math.Inf(1), TenantReach{}, time.Unix(0, 0), time.Second, 0, 1e6)
	if !k.Tenants.Capped["t0"] || !k.Tenants.Capped["flood"] || k.Tenants.Capped["light"] {
		t.Fatalf("capped %v, want flood and t0", k.Tenants.Capped)
	}
	// Capped, t0 holds its share: heavy still, and still capped.
	uses[0].Units, uses[1].Units = 46, 46
	k.LearnTenants(uses, 0, 100, 0.02, math.Inf(1), TenantReach{}, time.Unix(0, 0), time.Second, 0, 1e6)
	if !k.Tenants.Capped["t0"] || math.Abs(k.Tenants.Level-46.5) > 0.01 {
		t.Fatalf("the next scan: capped %v at %g, want t0 still, at 46.5", k.Tenants.Capped, k.Tenants.Level)
	}
	// It holds less than half its share: light again, and not capped.
	uses[0].Units, uses[1].Units = 60, 20
	if level, mem, _ := FairLevel(uses, 100, 0.02, 0, math.Inf(1), mem); len(mem.Heavy) != 0 || math.Abs(level-73) > 0.01 {
		t.Fatalf("t0 at 20 of a share of 46.5: heavy %v, level %g; want none heavy, flood alone at 98-20-5 = 73", mem.Heavy, level)
	}
	// Each tenant turns heavy (or light) at most once a scan, so the
	// level settles: x (weight 0.5) holds 3, over its share at the level
	// of 3 that a light peak of 95 leaves, and turns heavy; the peak then
	// goes uncounted (it counted x), and y and x share 98 by weight. x,
	// far below its share now, stays heavy until the next scan.
	if level, mem, _ := FairLevel([]TenantUse{use("y", 1, true), {Tag: "x", Weight: 0.5, Units: 3}}, 100, 0.02, 95, math.Inf(1), FairMemory{}); len(mem.Heavy) != 1 || math.Abs(level-98/1.5) > 0.01 {
		t.Fatalf("x at 3 beside a light peak of 95: heavy %v, level %g; want x heavy, level 98/1.5", mem.Heavy, level)
	}
	// Its calls stopped: it holds nothing, and is heavy no more.
	uses[0].Units, uses[1].Units = 46, 0
	if _, mem, _ := FairLevel(uses, 100, 0.02, 0, math.Inf(1), mem); len(mem.Heavy) != 0 {
		t.Fatalf("t0 gone: heavy %v, want none", mem.Heavy)
	}
}

// A tenant taken as satisfied stays so while it holds no more than it did,
// though the others fill the room it left; once it holds more, it weighs
// again.
func TestFairLevelKeepsTheSatisfied(t *testing.T) {
	left := []TenantUse{use("a", 33, true), use("b", 32, true), use("c", 10, true)}
	_, mem, _ := FairLevel(left, 100, 0.02, 0, math.Inf(1), FairMemory{})
	level, mem, ok := FairLevel(left, 100, 0.02, 0, math.Inf(1), mem)
	if !ok || math.Abs(level-44) > 0.01 || mem.Sat["c"] != 10 || len(mem.Sat) != 1 {
		t.Fatalf("c left: FairLevel = %g, %v, %v; want 44, c satisfied with 10", level, mem.Sat, ok)
	}
	// a and b took the room: no room is left.
	full := []TenantUse{use("a", 44, true), use("b", 44, true), use("c", 8, true)}
	if level, mem, _ := FairLevel(full, 100, 0.02, 0, math.Inf(1), mem); math.Abs(level-45) > 0.01 || mem.Sat["c"] != 8 {
		t.Errorf("the room taken: FairLevel = %g, %v; want 45, c satisfied with 8", level, mem.Sat)
	}
	if level, mem, _ := FairLevel(full, 100, 0.02, 0, math.Inf(1), FairMemory{}); math.Abs(level-98.0/3) > 0.01 || len(mem.Sat) != 0 {
		t.Errorf("the room taken, c not known as satisfied: FairLevel = %g, %v; want 32.67, none satisfied", level, mem.Sat)
	}
	back := []TenantUse{use("a", 44, true), use("b", 40, true), use("c", 12, true)}
	if level, mem, _ := FairLevel(back, 100, 0.02, 0, math.Inf(1), FairMemory{Sat: map[string]int{"c": 8}}); math.Abs(level-98.0/3) > 0.01 || len(mem.Sat) != 0 {
		t.Errorf("c back: FairLevel = %g, %v; want 32.67, none satisfied", level, mem.Sat)
	}
}

// A tenant short of its share, with room for what it lacks, is taken as
// satisfied only when the last scan saw it so too, holding no less (seed
// 30220: a tenant that left held 263 units of its share of 492 for a
// whole window, and 237 stayed free); a scan that catches the moment its
// old calls left and its next have not come yet does not.
func TestFairLevelTwoScansShort(t *testing.T) {
	short := []TenantUse{use("a", 33, true), use("b", 32, true), use("c", 20, true)}
	level, mem, _ := FairLevel(short, 100, 0.02, 0, math.Inf(1), FairMemory{})
	if math.Abs(level-98.0/3) > 0.01 || len(mem.Sat) != 0 || mem.Short["c"] != 20 {
		t.Fatalf("first scan: FairLevel = %g, sat %v, short %v; want 32.67, none satisfied, c short with 20", level, mem.Sat, mem.Short)
	}
	if level, mem, _ := FairLevel(short, 100, 0.02, 0, math.Inf(1), mem); math.Abs(level-39) > 0.01 || mem.Sat["c"] != 20 {
		t.Errorf("second scan: FairLevel = %g, sat %v; want 39, c satisfied with 20", level, mem.Sat)
	}
	// c took some of the room: it asks for its share.
	grew := []TenantUse{use("a", 33, true), use("b", 32, true), use("c", 24, true)}
	if level, mem, _ := FairLevel(grew, 100, 0.02, 0, math.Inf(1), mem); math.Abs(level-98.0/3) > 0.01 || len(mem.Sat) != 0 {
		t.Errorf("c grew: FairLevel = %g, sat %v; want 32.67, none satisfied", level, mem.Sat)
	}
	// No room for the rest of its share: it is not short, whatever the
	// last scan saw.
	fullish := []TenantUse{use("a", 40, true), use("b", 38, true), use("c", 20, true)}
	if level, mem, _ := FairLevel(fullish, 100, 0.02, 0, math.Inf(1), FairMemory{Short: map[string]int{"c": 20}}); math.Abs(level-98.0/3) > 0.01 || len(mem.Sat) != 0 || len(mem.Short) != 0 {
		t.Errorf("no room: FairLevel = %g, sat %v, short %v; want 32.67, none satisfied or short", level, mem.Sat, mem.Short)
	}
}

// With several limits, another may bind while the first window has room:
// a tenant short there, where the limits leave no room now (free), finds
// no room for the rest of its share, and two scans that see it short do
// not take it as asking for less; with room under every limit, they do.
func TestFairLevelFreeUnderEveryLimit(t *testing.T) {
	// c lacks 29 units of its share of 49, and the window has 18 free: it
	// is short when the limits leave it half of what it lacks, 12.25.
	short := []TenantUse{use("a", 60, true), use("c", 20, true)}
	for _, tc := range []struct {
		free  float64
		sat   bool
		level float64
	}{{0, false, 49}, {8, false, 49}, {16, true, 78}, {math.Inf(1), true, 78}} {
		_, mem, _ := FairLevel(short, 100, 0.02, 0, tc.free, FairMemory{})
		level, mem, _ := FairLevel(short, 100, 0.02, 0, tc.free, mem)
		if _, sat := mem.Sat["c"]; sat != tc.sat || math.Abs(level-tc.level) > 0.01 {
			t.Errorf("free %g: FairLevel = %g, c satisfied %v; want %g, %v", tc.free, level, sat, tc.level, tc.sat)
		}
	}
}

// A tenant with calls queued in the scanning process asks for more than
// it holds, however short of its share two scans see it: its calls wait
// for room its cap does not leave (seed 34192: 92 units held under a cap
// of 94, its next call of 5 units queued). Taken as asking less, it and
// the tenant that had left were both satisfied, and the cap stayed where
// it was, with 71 units of the window free; now the tenant that left is
// satisfied alone, and the other's cap rises to the rest.
func TestFairLevelQueuedIsNotShort(t *testing.T) {
	uses := []TenantUse{use("a", 92, true), use("b", 22, true)}
	uses[0].Queued = true
	var mem FairMemory
	var level float64
	for scan := range 2 {
		level, mem, _ = FairLevel(uses, 192, 0.02, 0, math.Inf(1), mem)
		if _, short := mem.Short["a"]; short {
			t.Fatalf("scan %d: a, with calls queued, is short (%v)", scan, mem.Short)
		}
	}
	if want := 0.98*192 - 22; math.Abs(level-want) > 0.01 || mem.Sat["b"] != 22 || len(mem.Sat) != 1 {
		t.Errorf("second scan: FairLevel = %g, sat %v; want %g, b alone satisfied with 22", level, mem.Sat, want)
	}
	// Without calls queued here, a is short as b is, and both are taken
	// as asking less: the level stays.
	uses[0].Queued = false
	mem = FairMemory{}
	for range 2 {
		level, mem, _ = FairLevel(uses, 192, 0.02, 0, math.Inf(1), mem)
	}
	if len(mem.Sat) != 2 {
		t.Errorf("not queued: sat %v, want a and b", mem.Sat)
	}
}

// CapSlot finds the first score at which every window holding it leaves
// room under the cap, and CapHolds agrees with it.
func TestCapSlot(t *testing.T) {
	const w = 100
	five := []int64{10, 20, 30, 40, 250}
	for _, tc := range []struct {
		scores []int64
		floor  int64
		cap    int
		want   int64
	}{
		{five, 50, 5, 50},   // (-50, 50] holds 4
		{five, 50, 4, 110},  // 10 leaves at 110: (10, 110] holds 3
		{five, 50, 2, 130},  // 10, 20 and 30 leave by 130: (30, 130] holds 40
		{five, 200, 1, 350}, // (150, 250] holds 250 and (250, 350] nothing
		// Members on both sides, more than w apart, that no window holds
		// together: 100 fits between them (its neighbourhood, (0, 200),
		// holds both).
		{[]int64{10, 190}, 100, 2, 100},
		// A window ahead over the cap: past its end, and until its
		// members leave the window that ends at the score.
		{[]int64{120, 130, 140}, 50, 3, 220},
	} {
		got := CapSlot(TenantMembers{Own: tc.scores}, tc.floor, w, 0, tc.cap, 1)
		if got != tc.want {
			t.Errorf("CapSlot(%v, floor %d, cap %d) = %d, want %d", tc.scores, tc.floor, tc.cap, got, tc.want)
		}
		with := append(slices.Clone(tc.scores), got)
		slices.Sort(with)
		if !CapHolds(with, got, w, tc.cap) {
			t.Errorf("CapHolds at CapSlot's %d (%v, cap %d) is false", got, tc.scores, tc.cap)
		}
		if before := got - 1; got > tc.floor && CapHolds(slices.Sorted(slices.Values(append(slices.Clone(tc.scores), before))), before, w, tc.cap) {
			t.Errorf("CapHolds at %d, before CapSlot's %d (%v, cap %d), is true", before, got, tc.scores, tc.cap)
		}
	}
}

// The room another process's member frees goes to this process only
// yield after the member leaves: its own process claims it first.
func TestCapSlotYieldsToTheOwner(t *testing.T) {
	const w, yield = 100, 30
	for _, tc := range []struct {
		m      TenantMembers
		floor  int64
		cap, n int
		want   int64
		what   string
	}{
		{TenantMembers{Own: []int64{10}}, 50, 1, 1, 110, "its own member: the room is its own at once"},
		{TenantMembers{Others: []int64{10}}, 50, 1, 1, 140, "another's: the room is this one's yield later"},
		{TenantMembers{Own: []int64{10}, Others: []int64{20}}, 50, 2, 1, 110, "its own leaves first"},
		{TenantMembers{Own: []int64{20}, Others: []int64{10}}, 50, 2, 1, 120, "its own leaves before another's room is its"},
		{TenantMembers{Others: []int64{10, 20}}, 50, 2, 2, 150, "two units: both others' rooms"},
		{TenantMembers{Others: []int64{10}}, 200, 1, 1, 200, "long gone"},
		{TenantMembers{Others: []int64{120}}, 50, 1, 1, 250, "a window ahead: past it and its yield"},
	} {
		if got := CapSlot(tc.m, tc.floor, w, yield, tc.cap, tc.n); got != tc.want {
			t.Errorf("%s: CapSlot(%+v, floor %d, cap %d, n %d) = %d, want %d", tc.what, tc.m, tc.floor, tc.cap, tc.n, got, tc.want)
		}
		// Without the yield, every member is as its own.
		if got, want := CapSlot(tc.m, tc.floor, w, 0, tc.cap, tc.n), CapSlot(TenantMembers{Own: tc.m.All()}, tc.floor, w, 0, tc.cap, tc.n); got != want {
			t.Errorf("%s, no yield: %d, want %d as if all were its own", tc.what, got, want)
		}
	}
}

// A process that would hold less than its equal part of the cap, its
// claim counted, takes another's room at once; one at its part or past it
// yields. The part is not rounded down (seed 66276: a cap of 6 among 4
// processes, a process that held none took others' room only a yield
// after each burst, when the limit was full again, for 5 windows).
func TestYieldOnlyAtItsPart(t *testing.T) {
	const yield = 30
	for _, tc := range []struct {
		m      TenantMembers
		cap, n int
		want   int64
		what   string
	}{
		{TenantMembers{Procs: 4}, 6, 1, 0, "none held, a part of 1.5: takes it at once"},
		{TenantMembers{Own: []int64{10}, Procs: 4}, 6, 1, yield, "one held, 2 with the claim, past 1.5"},
		{TenantMembers{Own: []int64{10}, Procs: 3}, 7, 1, 0, "2 with the claim, under 7/3"},
		{TenantMembers{Own: []int64{10}, Procs: 2}, 4, 1, yield, "2 with the claim, at its part of 2"},
		{TenantMembers{Procs: 1}, 6, 1, yield, "alone: the others' room is theirs first"},
		{TenantMembers{Own: []int64{-5}, Procs: 4}, 6, 1, 0, "its member before from does not count"},
	} {
		if got := tc.m.yield(yield, 0, tc.cap, tc.n); got != tc.want {
			t.Errorf("%s: yield(%+v, cap %d, n %d) = %d, want %d", tc.what, tc.m, tc.cap, tc.n, got, tc.want)
		}
	}
}

// A capped tenant's request waits for the slot its cap leaves and claims
// little ahead, without holding back another tenant's request behind it;
// within reach, a round claims for it as many slots as its cap leaves.
// cappedPlan is a PlanIn (see planAt) under 100 per second, tenant a
// capped at 10 with n calls of its own that leave the window at leave
// (server µs), and its rules.
func cappedPlan(n int, leave int64) (*Rules, PlanIn) {
	c := testConfig(100, time.Second, time.Second)
	in := planAt(100)
	in.Known = Known{Tenants: TenantShares{
		TenantReach: TenantReach{Ahead: 20_000}, Level: 10, Until: in.Now.Add(time.Second),
		Capped: map[string]bool{"a": true},
		Scores: map[string]TenantMembers{"a": {Own: slices.Repeat([]int64{leave - c.Wins[0].W}, n)}},
	}}
	return c, in
}

func TestPlanCappedTenant(t *testing.T) {
	// 10 calls that leave the window at 1.5s.
	c, in := cappedPlan(10, 1_500_000)
	w := c.Wins[0].W
	reqs := []Request{{N: 1, Prio: Normal, Tenant: "a"}, {N: 1, Prio: Normal, Tenant: "b"}}
	p := Plan(c, in, reqs, PlanOut{})
	if p.Each[0].Action != Keep || p.Each[1].Action != Take || p.Each[1].Score != 1_001_000 {
		t.Fatalf("a's request %+v, b's %+v: want a's kept for its slot 0.5s on, b's claimed now", p.Each[0], p.Each[1])
	}
	p = Plan(c, in, reqs[:1], PlanOut{})
	if want := 480 * time.Millisecond; p.Each[0].Action != Keep || p.Sleep != want {
		t.Fatalf("a alone: %+v, sleep %s; want kept, sleeping until its slot comes within reach (%s)", p.Each[0], p.Sleep, want)
	}
	// 8 calls that leave at 1.01s, within reach: 2 more fit now, 8 more at
	// 1.01s, and the 11th only once those 2 leave.
	in.Known.Tenants.Scores["a"] = TenantMembers{Own: slices.Repeat([]int64{1_010_000 - w}, 8)}
	reqs = slices.Repeat([]Request{{N: 1, Prio: Normal, Tenant: "a"}}, 11)
	p = Plan(c, in, reqs, PlanOut{})
	for i, d := range p.Each {
		want := Decision{Action: Take, Score: 1_001_000}
		switch {
		case i >= 10:
			want = Decision{Action: Keep}
		case i >= 2:
			want.Score = 1_010_000
		}
		if d.Action != want.Action || d.Score != want.Score {
			t.Fatalf("a's request %d: %+v; want %v at %d (all: %+v)", i, d, want.Action, want.Score, p.Each)
		}
	}
	// Its members not yet read: one claim, which reads them.
	delete(in.Known.Tenants.Scores, "a")
	p = Plan(c, in, reqs[:2], PlanOut{})
	if p.Each[0].Action != Take || p.Each[1].Action != Keep {
		t.Fatalf("a's requests, members unknown: %+v; want one claimed, one kept", p.Each)
	}
}

// A capped tenant's members read for claims placed ahead say nothing of
// the windows before them: a claim nearer now waits until the windows
// the read covers (seed 572: such claims went at now, against a read that
// missed the tenant's burst a window ago, and the store refused them).
func TestPlanCappedTenantReadAhead(t *testing.T) {
	c, in := cappedPlan(0, 0)
	w := c.Wins[0].W
	now := int64(1_001_000) // the soonest slot (see planAt)
	reqs := []Request{{N: 1, Prio: Normal, Tenant: "a"}}
	// Read for a claim 10ms ahead: none of its members after that window's start.
	in.Known.Tenants.Scores["a"] = TenantMembers{After: now + 10_000 - w, Procs: 1}
	in.Known.Tenants.Ahead = 20_000
	p := Plan(c, in, reqs, PlanOut{})
	if d := p.Each[0]; d.Action != Take || d.Score != now+10_000 {
		t.Fatalf("a's request, members read from 10ms ahead less a window: %+v; want claimed at %d, the first score the read covers", d, now+10_000)
	}
	// Read from a window before now or earlier: claimed now.
	in.Known.Tenants.Scores["a"] = TenantMembers{After: now - w, Procs: 1}
	p = Plan(c, in, reqs, PlanOut{})
	if d := p.Each[0]; d.Action != Take || d.Score != now {
		t.Fatalf("a's request, members read from a window before now: %+v; want claimed now, at %d", d, now)
	}
	// Beyond its reach: kept, as for a slot its cap leaves.
	in.Known.Tenants.Scores["a"] = TenantMembers{After: now + 30_000 - w, Procs: 1}
	p = Plan(c, in, reqs, PlanOut{})
	if d := p.Each[0]; d.Action != Keep {
		t.Fatalf("a's request, members read from 30ms ahead less a window: %+v; want kept until that comes within reach (20ms)", d)
	}
}

// Once a capped tenant's request stays queued, its requests behind it of
// as many units or more stay queued too; a smaller one that fits is
// still claimed.
func TestPlanCappedTenantQueuesBehindItsOwn(t *testing.T) {
	// 9 calls that leave the window at 1.5s: room for 1 until then.
	c, in := cappedPlan(9, 1_500_000)
	reqs := []Request{{N: 2, Prio: Normal, Tenant: "a"}, {N: 1, Prio: Normal, Tenant: "a"}, {N: 3, Prio: Normal, Tenant: "a"}, {N: 1, Prio: Normal, Tenant: "b"}}
	p := Plan(c, in, reqs, PlanOut{})
	want := []Action{Keep, Take, Keep, Take}
	for i, d := range p.Each {
		if d.Action != want[i] {
			t.Fatalf("request %d (%+v): %+v; want %v (all: %+v)", i, reqs[i], d, want[i], p.Each)
		}
	}
	if p.Each[1].Score != 1_001_000 {
		t.Fatalf("a's request of 1: %+v, want it claimed now", p.Each[1])
	}
}

// A request the known slots are too few for waits to learn more, though
// a capped tenant's request has the round sleep until its slot comes
// within reach: the round learns enough slots for it at once, in either
// order (seed 30688: a call of 65 units behind 64 known slots waited most
// of a window, and every call behind it).
func TestPlanLearnsSlotsBesideACappedTenant(t *testing.T) {
	c := testConfig(100, time.Second, time.Second)
	in := planAt(100)
	w := c.Wins[0].W
	in.Known = Known{Near: true, Slots: []int64{0, 0, 0}, Tenants: TenantShares{
		TenantReach: TenantReach{Ahead: 20_000}, Level: 10, Until: in.Now.Add(time.Second),
		Capped: map[string]bool{"a": true},
		// 10 calls that leave the window at 1.5s: a's next slot.
		Scores: map[string]TenantMembers{"a": {Own: slices.Repeat([]int64{1_500_000 - w}, 10)}},
	}}
	big := Request{N: 4, Prio: Normal, Tenant: "b", SoonTried: true}
	capped := Request{N: 1, Prio: Normal, Tenant: "a"}
	for _, reqs := range [][]Request{{big, capped}, {capped, big}} {
		p := Plan(c, in, reqs, PlanOut{})
		if len(p.Claims) != 0 {
			t.Fatalf("%+v: claims %+v, want none", reqs, p.Claims)
		}
		if !p.Exact || p.Slots < big.N {
			t.Errorf("%+v: exact %v, learning %d slots (sleep %s); want at least %d, for b's call", reqs, p.Exact, p.Slots, p.Sleep, big.N)
		}
	}
}

// While a tenant is held to a cap, another tenant's call is claimed at
// the soonest slot until SoonTried, whatever free slots the last reply
// told of (they lie past the capped tenant's claims ahead), and at the
// known slots once it is; with no tenant capped, at the known slots.
func TestPlanSoonBesideACappedTenant(t *testing.T) {
	c := testConfig(100, time.Second, time.Second)
	in := planAt(100)
	in.Known = Known{Near: true, Slots: []int64{1_020_000, 1_020_000}, Tenants: TenantShares{
		TenantReach: TenantReach{Ahead: 20_000}, Level: 90, Until: in.Now.Add(time.Second),
		Capped: map[string]bool{"a": true},
	}}
	for _, tc := range []struct {
		name string
		req  Request
		caps map[string]bool
		want int64
	}{
		{"another tenant", Request{N: 1, Prio: Normal, Tenant: "b"}, in.Known.Tenants.Capped, 1_001_000},
		{"no tenant", Request{N: 1, Prio: Normal}, in.Known.Tenants.Capped, 1_001_000},
		{"tried once", Request{N: 1, Prio: Normal, Tenant: "b", SoonTried: true}, in.Known.Tenants.Capped, 1_020_000},
		{"no tenant capped", Request{N: 1, Prio: Normal, Tenant: "b"}, nil, 1_020_000},
	} {
		in := in
		in.Known.Tenants.Capped = tc.caps
		p := Plan(c, in, []Request{tc.req}, PlanOut{})
		if d := p.Each[0]; d.Action != Take || d.Score != tc.want {
			t.Errorf("%s: %+v; want a claim at %d", tc.name, d, tc.want)
		}
	}
}

// Looser tells a cap that rose, or a tenant no longer capped, from shares
// that hold every capped tenant as tight or tighter.
func TestTenantSharesLooser(t *testing.T) {
	now := time.Unix(1000, 0)
	shares := func(level float64, capped ...string) TenantShares {
		s := TenantShares{Level: level, Until: now.Add(time.Second), Capped: map[string]bool{}}
		for _, tag := range capped {
			s.Capped[tag] = true
		}
		return s
	}
	a, b := "aaaaaaaa001000", "bbbbbbbb002000" // weights 1 and 2
	for _, tc := range []struct {
		name     string
		was, now TenantShares
		want     bool
	}{
		{"the same", shares(30, a, b), shares(30, a, b), false},
		{"the level rose", shares(30, a, b), shares(45, a, b), true},
		{"the level fell", shares(30, a, b), shares(20, a, b), false},
		{"a rise within a unit of a's cap", shares(30, a), shares(30.5, a), false},
		{"b no longer capped", shares(30, a, b), shares(30, a), true},
		{"a newly capped", shares(30, b), shares(30, a, b), false},
		{"none capped before", shares(0), shares(30, a), false},
		{"the old shares expired", TenantShares{Level: 30, Until: now.Add(-time.Second), Capped: map[string]bool{a: true}}, shares(30, a), false},
	} {
		if got := tc.now.Looser(tc.was, now); got != tc.want {
			t.Errorf("%s: Looser = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The most the light tenants held lately stands for the hold, but not once
// every tenant that was light then is backlogged: its calls count in the
// shares then, and the room kept for them as light calls would stay empty
// (seed 55708). A light tenant that has gone quiet keeps its room.
func TestLearnTenantsLightGivesWayWhenItsTenantsAreBacklogged(t *testing.T) {
	at := time.Unix(100, 0)
	hold := 10 * time.Second
	var k Known
	// t2 holds 4 calls, none of them waited: light.
	k.LearnTenants([]TenantUse{use("t0", 8, true), use("t1", 6, true), use("t2", 4, false)}, 4, 22, 0, math.Inf(1), TenantReach{}, at, hold, 0, 1e6)
	if k.Tenants.Light != 4 {
		t.Fatalf("light %d, want 4", k.Tenants.Light)
	}
	// A scan later, t2 is backlogged, and nothing is light.
	uses := []TenantUse{use("t0", 4, true), use("t1", 4, true), use("t2", 4, true)}
	mem := k.Tenants.Fair
	k.LearnTenants(uses, 0, 22, 0, math.Inf(1), TenantReach{}, at.Add(time.Second), hold, 1e6, 1e6)
	if k.Tenants.Light != 0 {
		t.Fatalf("light %d once t2, light before, is backlogged: want 0", k.Tenants.Light)
	}
	if want, _, _ := FairLevel(uses, 22, 0, 0, math.Inf(1), mem); math.Abs(k.Tenants.Level-want) > 0.01 {
		t.Fatalf("level %g, want %g: nothing kept for light calls", k.Tenants.Level, want)
	}
	// A light tenant gone quiet (no call in the window) keeps its room.
	k = Known{}
	k.LearnTenants([]TenantUse{use("t0", 8, true), use("t2", 4, false)}, 4, 22, 0, math.Inf(1), TenantReach{}, at, hold, 0, 1e6)
	k.LearnTenants([]TenantUse{use("t0", 8, true)}, 0, 22, 0, math.Inf(1), TenantReach{}, at.Add(time.Second), hold, 1e6, 1e6)
	if k.Tenants.Light != 4 {
		t.Fatalf("light %d after t2 went quiet, want the 4 it held, for the hold", k.Tenants.Light)
	}
}

// A scan notes when the newest call of a tenant taken as asking for less
// leaves the window (Leaves), and when the oldest call of a capped tenant
// with none queued in the scanning process leaves it, and its room
// stays its process's no longer (Drops): the soonest of each, and neither
// for a tenant whose calls have all left, one queued here, or a tenant
// that is not capped.
func TestLearnTenantsLeavesAndDrops(t *testing.T) {
	const w, yield = 1_000_000, 50_000
	at := time.Unix(100, 0)
	reach := TenantReach{Yield: yield}
	scores := func(u TenantUse, first, last int64, queued bool) TenantUse {
		u.First, u.Last, u.Queued = first, last, queued
		return u
	}
	var k Known
	// Two scans see t1 short of its share (with room) and holding no more
	// at the second: satisfied. t0 has calls queued here; t2 is light.
	for i, serverNow := range []int64{10_000_000, 10_050_000} {
		uses := []TenantUse{
			scores(use("t0", 40, true), serverNow-900_000, serverNow+20_000, true),
			scores(use("t1", 10, true), 9_300_000, 9_600_000, false),
			scores(use("t2", 3, false), 9_200_000, 9_900_000, false),
		}
		k.LearnTenants(uses, 3, 100, 0.05, math.Inf(1), reach, at.Add(time.Duration(i)*50*time.Millisecond), 2*time.Second, serverNow, w)
	}
	if _, sat := k.Tenants.Fair.Sat["t1"]; !sat {
		t.Fatalf("t1 not satisfied: %+v", k.Tenants.Fair)
	}
	if want := int64(9_600_000 + w); k.Tenants.Leaves != want {
		t.Errorf("Leaves %d, want %d: t1's newest call leaves then", k.Tenants.Leaves, want)
	}
	if want := int64(9_300_000 + w + yield); k.Tenants.Drops != want {
		t.Errorf("Drops %d, want %d: t1, capped and queued nowhere here, holds a unit less then unless it calls again (t0 is queued here, t2 light)", k.Tenants.Drops, want)
	}
	// Once t1's calls have all left, neither.
	k.LearnTenants([]TenantUse{scores(use("t0", 40, true), 10_700_000, 10_700_000, true), scores(use("t1", 0, true), 0, 9_600_000, false)}, 0, 100, 0.05, math.Inf(1), reach, at.Add(time.Second), 2*time.Second, 10_600_000+w, w)
	if k.Tenants.Leaves != 0 || k.Tenants.Drops != 0 {
		t.Errorf("Leaves %d, Drops %d once t1's calls left: want neither", k.Tenants.Leaves, k.Tenants.Drops)
	}
}

// Weights whose sum is inexact in floating point (0.1, 0.2 and 0.3, as
// tags carry them) leave a rounding error when every backlogged tenant
// asks for less: it is no tenant's weight, and the level and the caps stay
// those of the shares, scan after scan (the error, 5.6e-17, made the level
// 3.5e19, and a cap's int overflowed to 1).
func TestFairLevelInexactWeights(t *testing.T) {
	tags := []string{"aaaaaaaa000100", "bbbbbbbb000200", "cccccccc000300"}
	var uses []TenantUse
	for _, tag := range tags {
		w, _ := TagWeight(tag)
		uses = append(uses, TenantUse{Tag: tag, Weight: w, Units: 10, Waited: 3, First: 1, Last: 2})
	}
	const limit = 4000
	var k Known
	now := time.Unix(0, 0)
	for scan := range 3 {
		k.LearnTenants(uses, 0, limit, 0.02, math.Inf(1), TenantReach{}, now, time.Second, 1000, 100)
		if l := k.Tenants.Level; l > limit/0.1 {
			t.Errorf("scan %d: level %g, over the limit at the least weight", scan, l)
		}
		for i, tag := range tags {
			// The budget (98% of the limit) by weight, 0.6 in all; a
			// cap rounds down, a float's error included.
			share := 3920 * (i + 1) / 6
			if c, ok := k.Tenants.Cap(tag, now); !ok || c > share || c < share-1 {
				t.Errorf("scan %d: tenant of weight 0.%d capped at %d (%v), want %d", scan, i+1, c, ok, share)
			}
		}
		now = now.Add(10 * time.Millisecond)
	}
}
