package core

import (
	"math"
	"testing"
	"time"
)

func TestMarginAndAllowance(t *testing.T) {
	ms := int64(time.Millisecond / time.Microsecond)
	for _, tc := range []struct {
		buffer            time.Duration
		errBound, slack   int64
		margin, allowance int64
	}{
		{50 * time.Millisecond, 100, 0, 0, 25*ms - 100},                           // a tight estimate: late by b/2 - e at most
		{50 * time.Millisecond, 12_500, 0, 0, 12_500},                             // e = b/4: still no margin, late by b/4 at most
		{50 * time.Millisecond, 20 * ms, 0, 7_500, 12_500},                        // past b/4: a margin, late by b/4 at most
		{50 * time.Millisecond, 100 * ms, 0, 87_500, 12_500},                      // seed 242's lopsided 201ms round trip
		{50 * time.Millisecond, 1 * ms, 20 * ms, 0, 24 * ms},                      // slack within what b/2 - e allows: no margin
		{50 * time.Millisecond, 1 * ms, 40 * ms, 16 * ms, 40 * ms},                // a call woken late asks for slack: late by the slack at most
		{0, 100 * ms, 0, 0, -100 * ms},                                            // a zero buffer promises no margin
		{time.Second, 100 * ms, 0, 0, 400 * ms},                                   // a long buffer covers the error
		{time.Second, 300 * ms, 0, 50 * ms, 250 * ms},                             // ... up to a quarter of it
		{50 * time.Millisecond, math.MaxInt32, 0, math.MaxInt32 - 12_500, 12_500}, // no overflow on absurd errors
	} {
		c := testConfig(10, time.Second, time.Second)
		c.Buffer = tc.buffer
		m := c.Margin(tc.errBound, tc.slack)
		if m != tc.margin {
			t.Errorf("buffer %s, error bound %dµs, slack %dµs: margin %dµs, want %dµs", tc.buffer, tc.errBound, tc.slack, m, tc.margin)
		}
		if a := c.Allowance(m, tc.errBound); a != tc.allowance {
			t.Errorf("buffer %s, error bound %dµs, margin %dµs: allowance %dµs, want %dµs", tc.buffer, tc.errBound, m, a, tc.allowance)
		}
	}
}

func TestSpreadHoldsPastTrims(t *testing.T) {
	if widen, hold := Spread(100, 0, 0); widen != 0 || hold {
		t.Fatalf("tight, nothing published: widen %d hold %v", widen, hold)
	}
	if widen, hold := Spread(100, 0, 30_000); widen != 30_000 || hold {
		t.Fatalf("tight, 30ms published: widen %d hold %v, want 30ms each way", widen, hold)
	}
	if widen, hold := Spread(40_000, 20_000, 30_000); widen != 50_000 || hold {
		t.Fatalf("a margin of 20ms with 30ms published: widen %d hold %v, want 50ms", widen, hold)
	}
	if _, hold := Spread(400_000, 300_000, 0); !hold {
		t.Fatalf("a 400ms error with a 300ms margin would count past the trims: not held")
	}
}

// TestEarliestBound: the bound on a call's slot from what the last reply
// told: the known slot of its rank, the last known past those, and a
// window per limit calls beyond.
func TestEarliestBound(t *testing.T) {
	wins := []Window{{Limit: 3, W: 1_000_000}}
	near := Known{Near: true, Slots: []int64{100, 200}}
	for _, tc := range []struct {
		name     string
		k        Known
		ahead, n int
		floor    int64
		want     int64
	}{
		{"first known slot", near, 0, 1, 0, 100},
		{"its rank's slot", near, 1, 1, 0, 200},
		{"past the known, the last known", near, 2, 1, 0, 200},
		{"a limit further, a window later", near, 3, 1, 0, 1_000_100},
		{"two limits and one further", near, 6, 2, 0, 2_000_200},
		{"the floor rules when later", near, 0, 1, 500, 500},
		{"far from the limit, slots do not count", Known{Slots: []int64{900}}, 0, 1, 50, 50},
		{"far from the limit, limits still do", Known{}, 3, 1, 50, 1_000_050},
	} {
		var slots []int64
		if tc.k.Near {
			slots = tc.k.Slots
		}
		if got := Earliest(wins, []int{3}, slots, tc.floor, tc.ahead, tc.n, 0); got != tc.want {
			t.Errorf("%s: earliest = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestPlanFailsAKeptCallTheKnownSlotsRuleOut: a waiting call beyond the
// slots the last reply told of, whose deadline comes before the bound
// they give, fails in the plan instead of waiting for more round trips.
func TestPlanFailsAKeptCallTheKnownSlotsRuleOut(t *testing.T) {
	c := testConfig(2, time.Second, time.Second)
	in := planAt(2)
	in.Known = Known{Near: true, Slots: []int64{1_500_000}}
	soon := in.Now.Add(200 * time.Millisecond)
	p := Plan(c, in, []Request{{Prio: Normal, N: 1}, {Prio: Normal, N: 1, Deadline: soon}, {Prio: Normal, N: 1, Deadline: soon.Add(time.Second)}}, PlanOut{})
	if d := p.Each[0]; d.Action != Take || d.Score != 1_500_000 {
		t.Fatalf("the first request: %+v, want the known slot", d)
	}
	// The second call's slot is at least a window past the first's: its
	// deadline rules it out; the third's, a second later, does not.
	if d := p.Each[1]; d.Action != Fail || d.Why != PastDeadline || !TooLate(d.At, soon) {
		t.Fatalf("request 1: %+v, want failed for its deadline, with a slot after it", d)
	}
	if d := p.Each[2]; d.Action != Keep {
		t.Fatalf("request 2: %+v, want kept", d)
	}
}
