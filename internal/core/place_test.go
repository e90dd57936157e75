package core

import (
	"math"
	"slices"
	"testing"
	"time"
)

// A round near the limit takes its fair share, or, for a process whose
// round trips are long, what the window frees in one of them, a batch at
// most.
func TestShare(t *testing.T) {
	c := testConfig(100, time.Second, time.Second) // fair share 5, w 1s
	for _, tc := range []struct {
		rtt  int64 // µs
		want int
	}{{0, 5}, {500, 5}, {50_000, 5}, {60_000, 6}, {150_000, 15}, {10_000_000, 64}, {-1, 5}} {
		if got := c.Share(tc.rtt); got != tc.want {
			t.Errorf("round trip %dµs: Share = %d, want %d", tc.rtt, got, tc.want)
		}
	}
	// The plan takes it.
	in := planAt(100)
	in.Clock.RTT = 150_000
	in.Known = Known{Near: true, Slots: slices.Repeat([]int64{1_300_000}, 40)}
	reqs := slices.Repeat([]Request{{Prio: Normal, N: 1}}, 20)
	if p := Plan(c, in, reqs, PlanOut{}); len(p.Claims) != 15 || p.Slots < 15 {
		t.Fatalf("a 150ms round trip: %d claims learning %d slots, want 15 claims, learning at least as many", len(p.Claims), p.Slots)
	}
}

// Each claim carries where a store that places claims may put it: a WaitN
// from the floor to its horizon (its deadline, if sooner); an AllowN only
// at soonest.
func TestPlanClaimBounds(t *testing.T) {
	c := testConfig(64, time.Second, time.Second)
	in := planAt(64)
	in.PausedTill = 1_050_000
	in.Known = Known{Near: true, Slots: []int64{1_200_000, 1_300_000, 1_400_000}}
	deadline := in.Now.Add(800 * time.Millisecond) // server 1,800,000
	p := Plan(c, in, []Request{{Prio: Normal, N: 1, Now: true}, {Prio: Normal, N: 1}, {Prio: Normal, N: 1, Deadline: deadline}}, PlanOut{})
	// The AllowN is refused during the pause: the WaitNs claim.
	want := []Claim{
		{Score: 1_200_000, N: 1, Prio: Normal, Floor: 1_050_000, Last: 1_001_000 + 1_000_000, Reach: 1_001_000 + 1_000_000},
		{Score: 1_300_000, N: 1, Prio: Normal, Floor: 1_050_000, Last: 1_800_000 - 1_000, Reach: 1_001_000 + 1_000_000},
	}
	if !slices.Equal(p.Claims, want) {
		t.Fatalf("claims %+v, want %+v", p.Claims, want)
	}
	in.PausedTill = 0
	p = Plan(c, in, []Request{{Prio: Normal, N: 2, Now: true}}, PlanOut{})
	if cl := p.Claims[0]; cl.Floor != 1_001_000 || cl.Last != 1_001_000 || cl.Reach != math.MaxInt64 {
		t.Fatalf("an AllowN's claim %+v, want bounds at soonest (1001000) that stop no other", cl)
	}
}

// Claims the store placed move to their scores; those it did not place are
// not admitted, and neither count as the attempt's own near a check nor
// are dropped from the free slots learned (their members are not there).
func TestResolvePlaced(t *testing.T) {
	c := testConfig(3, time.Second, time.Second)
	a := &Attempt{Adds: []Entry{{Score: 1_100_000, Member: "a"}, {Score: 1_100_000, Member: "b"}, {Score: 1_200_000, Member: "c"}},
		Lims: []int{3}, Planned: Planned{Soonest: 1_001_000}, Learn: Learning{Slots: 2}}
	claims := []Claim{{Score: 1_100_000, N: 1, First: 0, Prio: Normal}, {Score: 1_100_000, N: 1, First: 1, Prio: Normal}, {Score: 1_200_000, N: 1, First: 2, Prio: Normal}}
	a.Place, a.Claims = true, claims
	r := Reply{RiderReply: RiderReply{Placed: []int64{1_400_000, 0, 1_400_000}}}
	a.SetPlaced(r.Placed)
	if !slices.Equal(a.Checks, []int64{1_400_000}) || a.Adds[0].Score != 1_400_000 || a.Adds[2].Score != 1_400_000 || a.Adds[1].Score != 1_100_000 {
		t.Fatalf("after placement: checks %v adds %+v, want the placed members at 1400000, one check", a.Checks, a.Adds)
	}
	PlaceClaims(claims, r)
	if claims[0].Score != 1_400_000 || claims[1].Score != 1_100_000 || claims[2].Score != 1_400_000 {
		t.Fatalf("claims %+v, want the placed ones at their scores", claims)
	}
	// Two placed members and one other in the neighbourhood: 3 on a
	// limit of 3. The claim not placed, at its old score within w, must
	// not make the count look like less of the others'.
	r.Counts = [][]int64{{3}}
	r.Tails = [][]Entry{{{Score: 500_000, Member: "x"}, {Score: 1_400_000, Member: "a"}, {Score: 1_400_000, Member: "c"}}}
	in := ResolveIn{A: a, R: r, Claims: claims, Leaving: []bool{false, false, false}, Lims: []int{3}, Arrived: 1_001_000}
	out := Resolve(c, in, ResolveOut{})
	if !out.OK[0] || out.OK[1] || !out.OK[2] || !out.Near {
		t.Fatalf("%+v, want both placed claims admitted, the other refused, near", out.OK)
	}
	r.Counts = [][]int64{{4}} // one member too many: the second placed claim does not fit
	in.R = r
	if out = Resolve(c, in, ResolveOut{}); !out.OK[0] || out.OK[1] || out.OK[2] {
		t.Fatalf("4 counted on 3: %+v, want the first placed claim only", out.OK)
	}
}

// A process's claims are placed by the store once the window frees a slot
// within its round trip: 10.5ms at 100 a second (w 1.05s).
func TestStaleSlots(t *testing.T) {
	c := testConfig(100, time.Second, time.Second)
	c.Wins[0].W = 1_050_000
	for _, tc := range []struct {
		rtt  int64
		want bool
	}{{500, false}, {10_499, false}, {10_500, true}, {150_000, true}, {-1, false}} {
		if got := c.StaleSlots(tc.rtt); got != tc.want {
			t.Errorf("round trip %dµs: StaleSlots = %v, want %v", tc.rtt, got, tc.want)
		}
	}
}
