package metrics

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// scored is a call with a score, returned and sent times, whose Wait
// began long before.
func scored(replica int, score, returned, sent, arrival int64) Call {
	return Call{Replica: replica, Score: score, Started: score - 1000, Returned: returned, Sent: sent, Arrival: arrival, HasScore: true, HasTimes: true}
}

// onTime is a call that returned at its score and arrived at once.
func onTime(replica int, score int64) Call { return scored(replica, score, score, score, score) }

func TestClassify(t *testing.T) {
	const half = 5
	for _, c := range []struct {
		name string
		call Call
		want Class
	}{
		{"on time", onTime(0, 100), InTime},
		{"early within half", scored(0, 100, 95, 95, 95), InTime},
		{"late within half", scored(0, 100, 100, 101, 105), InTime},
		{"early", scored(0, 100, 90, 92, 94), Early},
		{"late wake", scored(0, 100, 106, 106, 107), LateWake},
		{"late wake, sent and arrived later still", scored(0, 100, 110, 130, 140), LateWake},
		{"late wake that began in time", Call{Score: 100, Started: 105, Returned: 110, Sent: 110, Arrival: 111, HasScore: true, HasTimes: true}, LateWake},
		{"scored before it began: estimate behind", Call{Score: 100, Started: 106, Returned: 107, Sent: 107, Arrival: 108, HasScore: true, HasTimes: true}, Behind},
		{"scored before it began, but in time", Call{Score: 100, Started: 103, Returned: 104, Sent: 104, Arrival: 105, HasScore: true, HasTimes: true}, InTime},
		{"late send", scored(0, 100, 105, 106, 107), LateSend},
		{"late HTTP", scored(0, 100, 100, 105, 120), LateHTTP},
		{"no score", Call{Arrival: 500, Returned: 1, Sent: 2, HasTimes: true}, NoScore},
		{"a score without times, late", Call{Score: 100, Arrival: 200, HasScore: true}, LateWake},
		{"a score without times, early", Call{Score: 100, Arrival: 0, HasScore: true}, Early},
	} {
		if got := Classify(c.call, half); got != c.want {
			t.Errorf("%s: Classify(%+v) = %s, want %s", c.name, c.call, got, c.want)
		}
	}
	for c := range NumClasses {
		if c.String() == "" || c.String() == "?" {
			t.Errorf("class %d has no name", c)
		}
	}
}

func TestIntrudes(t *testing.T) {
	const window, half = 100, 5
	for _, c := range []struct {
		name     string
		call     Call
		from, to int64
		want     bool
	}{
		// The window (0, 100]'s score window is (-5, 105].
		{"on time", onTime(0, 50), 100, 101, false},
		{"a stray whose score is still in the score window", scored(0, 10, 30, 30, 30), 100, 101, false},
		{"early from the next window", scored(0, 110, 90, 90, 90), 100, 101, true},
		{"late from the previous one", scored(0, -10, 1, 1, 1), 100, 101, true},
		{"no score", Call{Arrival: 50}, 100, 101, false},
		{"not in the windows at all", onTime(0, 500), 100, 101, false},
		// Ends [100, 120): a call arriving at 110 early by 15 (score
		// 125) is in the windows ending in [110, 120), whose score
		// windows reach 125 only from the end 120: an intruder.
		{"early, over a run of windows", scored(0, 125, 110, 110, 110), 100, 120, true},
		// Ends [120, 200): its score window is in all of them.
		{"early, over windows that hold its score", scored(0, 125, 110, 110, 110), 120, 200, false},
	} {
		if got := Intrudes(c.call, c.from, c.to, window, half); got != c.want {
			t.Errorf("%s: Intrudes(%+v, %d, %d) = %v, want %v", c.name, c.call, c.from, c.to, got, c.want)
		}
	}
}

// count is the number of arrivals in (t-window, t].
func count(sorted []int64, window, t int64) int {
	n := 0
	for _, a := range sorted {
		if a > t-window && a <= t {
			n++
		}
	}
	return n
}

func TestOverfullStretches(t *testing.T) {
	// Limit 2, window 10: (-5, 5] holds 0, 3, 5 from 5 on, until 0 leaves
	// at 10; (12, 22] holds 20, 21, 22 from 22 on, and 23 too from 23,
	// until 20 leaves at 30 and 21 at 31.
	ts := []int64{0, 3, 5, 20, 21, 22, 23}
	got := OverfullStretches(ts, 2, 10)
	want := []Stretch{
		{From: 5, To: 10, Lo: 0, Hi: 3, Peak: 3, PeakEnd: 5},
		{From: 22, To: 31, Lo: 3, Hi: 7, Peak: 4, PeakEnd: 23},
	}
	// Check the example by brute force before trusting it.
	for _, s := range want {
		for tt := s.From; tt < s.To; tt++ {
			if n := count(ts, 10, tt); n <= 2 {
				t.Fatalf("example wrong: (%d, %d] holds %d", tt-10, tt, n)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("OverfullStretches = %+v, want %+v", got, want)
	}
	if got := OverfullStretches(ts, 4, 10); got != nil {
		t.Errorf("at a limit of 4: %+v, want none", got)
	}
	if got := OverfullStretches(nil, 0, 10); got != nil {
		t.Errorf("no arrivals: %+v", got)
	}
}

// TestOverfullStretchesBrute checks, on random arrivals, that a window end
// t lies in a stretch exactly when (t-window, t] is over the limit, that
// each stretch's peak is its fullest window, and that Lo:Hi are the
// arrivals in its windows.
func TestOverfullStretchesBrute(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 300 {
		ts := make([]int64, r.IntN(60))
		for k := range ts {
			ts[k] = r.Int64N(300)
		}
		slices.Sort(ts)
		limit, window := r.IntN(8), 1+r.Int64N(80)
		got := OverfullStretches(ts, limit, window)
		in := func(tt int64) (Stretch, bool) {
			for _, s := range got {
				if tt >= s.From && tt < s.To {
					return s, true
				}
			}
			return Stretch{}, false
		}
		for tt := int64(-1); tt < 300+window+1; tt++ {
			_, ok := in(tt)
			if n := count(ts, window, tt); ok != (n > limit) {
				t.Fatalf("case %d (limit %d window %d): end %d holds %d, in a stretch: %v (%+v)", i, limit, window, tt, n, ok, got)
			}
		}
		for _, s := range got {
			peak, end := 0, int64(0)
			for tt := s.From; tt < s.To; tt++ {
				if n := count(ts, window, tt); n > peak {
					peak, end = n, tt
				}
			}
			if s.Peak != peak || s.PeakEnd != end {
				t.Fatalf("case %d: stretch %+v, brute peak %d at %d", i, s, peak, end)
			}
			for k, a := range ts {
				inWindows := a > s.From-window && a < s.To
				if inWindows != (k >= s.Lo && k < s.Hi) {
					t.Fatalf("case %d: stretch %+v: arrival %d (#%d) in its windows: %v", i, s, a, k, inWindows)
				}
			}
		}
		if len(got) > 0 && slices.MaxFunc(got, func(a, b Stretch) int { return a.Peak - b.Peak }).Peak != MaxInWindow(ts, window) {
			t.Fatalf("case %d: peaks %+v, MaxInWindow %d", i, got, MaxInWindow(ts, window))
		}
	}
}

// TestAttribute builds a run with a limit of 3 per 100 and a buffer of
// 10 (half 5) in which five windows are over the limit by one call, each
// because of one intruder of another class, and scores that keep the
// invariant: groups of three scores 112 apart, the last of one group and
// the first of the next 110 apart, which no window of 110 holds together.
func TestAttribute(t *testing.T) {
	const limit, window, buffer = 3, 100, 10
	group := func(k int64) (a, b, c int64) { return 112 * k, 112*k + 1, 112*k + 2 }
	var calls []Call
	add := func(cs ...Call) { calls = append(calls, cs...) }
	on := func(k int64, replica int) {
		a, b, c := group(k)
		add(onTime(replica, a), onTime(replica, b), onTime(replica, c))
	}
	// Group 0 on time but for a stray that stays in its score window (late
	// by 10: a late wake); group 1's first call arrives 15 early, into
	// (-3, 97] with group 0: an early intruder.
	a0, a1, a2 := group(0)
	add(onTime(0, a0), scored(0, a1, a1+10, a1+10, a1+10), onTime(0, a2))
	b0, b1, b2 := group(1)
	add(scored(1, b0, b0-15, b0-15, b0-15), onTime(1, b1), onTime(1, b2))
	// Group 2's last call wakes 20 late and arrives at 248, in (238, 338]
	// with group 3.
	c0, c1, c2 := group(2)
	add(onTime(2, c0), onTime(2, c1), scored(2, c2, c2+20, c2+21, c2+22))
	on(3, 3)
	// Group 4's last call returns on time and is sent 20 late (a late
	// send), into (462, 562] with group 5.
	e0, e1, e2 := group(4)
	add(onTime(4, e0), onTime(4, e1), scored(4, e2, e2, e2+20, e2+22))
	on(5, 5)
	// Group 6's last call is sent on time and arrives 22 late (late
	// HTTP), into (686, 786] with group 7.
	g0, g1, g2 := group(6)
	add(onTime(6, g0), onTime(6, g1), scored(6, g2, g2, g2+2, g2+22))
	on(7, 7)
	// Group 8's last call began its Wait 20 after its score (the replica's
	// estimate lagged) and went at once, into (910, 1010] with group 9.
	i0, i1, i2 := group(8)
	add(onTime(8, i0), onTime(8, i1), Call{Replica: 8, Score: i2, Started: i2 + 20, Returned: i2 + 20, Sent: i2 + 20, Arrival: i2 + 22, HasScore: true, HasTimes: true})
	on(9, 9)
	slices.SortStableFunc(calls, func(x, y Call) int { return int(x.Arrival - y.Arrival) })

	a := Attribute(calls, limit, window, buffer)
	if a.ScoresMax != limit {
		t.Errorf("ScoresMax = %d, want %d: the example keeps the invariant", a.ScoresMax, limit)
	}
	if want := [NumClasses]int{InTime: 24, Early: 1, Behind: 1, LateWake: 2, LateSend: 1, LateHTTP: 1}; a.Classes != want {
		t.Errorf("Classes = %v, want %v", a.Classes, want)
	}
	type want struct {
		from, to int64
		intruder Class
		replica  int
	}
	wants := []want{{97, 100, Early, 1}, {338, 348, LateWake, 2}, {562, 572, LateSend, 4}, {786, 796, LateHTTP, 6}, {1010, 1020, Behind, 8}}
	if len(a.Windows) != len(wants) {
		t.Fatalf("%d windows over the limit, want %d: %+v", len(a.Windows), len(wants), a.Windows)
	}
	for i, w := range a.Windows {
		x := wants[i]
		var one [NumClasses]int
		one[x.intruder] = 1
		switch {
		case w.From != x.from || w.To != x.to || w.Peak != 4 || w.Excess != 1:
			t.Errorf("window %d: [%d, %d) peak %d excess %d, want [%d, %d) peak 4 excess 1", i, w.From, w.To, w.Peak, w.Excess, x.from, x.to)
		case w.Accounted != limit || w.PeakIntruders != one || w.Intruders != one:
			t.Errorf("window %d: accounted %d, intruders %v in its peak and %v in all, want %d and one %s", i, w.Accounted, w.PeakIntruders, w.Intruders, limit, x.intruder)
		case len(w.PeakIntruderIx) != 1 || calls[w.PeakIntruderIx[0]].Replica != x.replica || !slices.Equal(w.IntruderIx, w.PeakIntruderIx):
			t.Errorf("window %d: intruders %v (peak %v), want one call of replica %d", i, w.IntruderIx, w.PeakIntruderIx, x.replica)
		case w.ScoresOver(limit):
			t.Errorf("window %d: scores over the limit (%d)", i, w.ScoresMax)
		}
	}
	// The first window also holds group 0's late call, a stray but not an
	// intruder: its score is in the window's score window.
	if w := a.Windows[0]; w.PeakClasses != [NumClasses]int{InTime: 2, Early: 1, LateWake: 1} || w.Classes != w.PeakClasses {
		t.Errorf("first window's classes: peak %v, all %v", w.PeakClasses, w.Classes)
	}
}

// TestAttributeScoresOver: scores that break the invariant show as such,
// with no intruder to blame.
func TestAttributeScoresOver(t *testing.T) {
	calls := []Call{onTime(0, 0), onTime(0, 10), onTime(1, 20), onTime(1, 50)}
	a := Attribute(calls, 3, 100, 10)
	if a.ScoresMax != 4 || len(a.Windows) != 1 {
		t.Fatalf("ScoresMax %d, windows %+v", a.ScoresMax, a.Windows)
	}
	w := a.Windows[0]
	if !w.ScoresOver(3) || w.Accounted != 4 || w.PeakIntruders != [NumClasses]int{} || len(w.IntruderIx) != 0 {
		t.Errorf("window %+v: want scores over the limit, all 4 accounted, no intruder", w)
	}
}

// TestAttributeNoScores: a peer's calls, without scores, still give the
// windows over the limit, every call of class NoScore.
func TestAttributeNoScores(t *testing.T) {
	calls := []Call{{Arrival: 0}, {Arrival: 1}, {Arrival: 2}, {Arrival: 150}}
	a := Attribute(calls, 2, 100, 10)
	if a.ScoresMax != 0 || a.Classes != [NumClasses]int{NoScore: 4} || len(a.Windows) != 1 {
		t.Fatalf("attribution %+v", a)
	}
	if w := a.Windows[0]; w.From != 2 || w.To != 100 || w.Peak != 3 || w.Accounted != 0 || w.PeakClasses[NoScore] != 3 || len(w.IntruderIx) != 0 {
		t.Errorf("window %+v", w)
	}
}

func TestDistribution(t *testing.T) {
	xs := []int64{5, -3, 10, 0, 2}
	if got, want := Distribution(xs), (Dist{N: 5, Min: -3, P50: 2, P99: 10, Max: 10}); got != want {
		t.Errorf("Distribution = %+v, want %+v", got, want)
	}
	if !slices.Equal(xs, []int64{5, -3, 10, 0, 2}) {
		t.Errorf("Distribution modified its input: %v", xs)
	}
	if got := Distribution(nil); got != (Dist{}) {
		t.Errorf("Distribution(nil) = %+v", got)
	}
}

func TestClockEstimate(t *testing.T) {
	// Sent at 0, back at 10; the server read 8: 3 after the midpoint.
	if s := NewClockSample(0, 10, 8); s != (ClockSample{SentNs: 0, RTTNs: 10, OffsetNs: 3}) {
		t.Errorf("NewClockSample = %+v", s)
	}
	var samples []ClockSample
	// Sample k is sent at 100k, back after rtts[k], offset k.
	rtts := []int64{50, 40, 45, 60, 60, 60, 60, 60, 60, 60, 60}
	for k, rtt := range rtts {
		samples = append(samples, ClockSample{SentNs: 100 * int64(k), RTTNs: rtt, OffsetNs: int64(k)})
	}
	for _, c := range []struct {
		at          int64
		offset, rtt int64
		ok          bool
	}{
		{49, 0, 0, false}, // the first is not back yet
		{50, 0, 50, true},
		{139, 0, 50, true},
		{140, 1, 40, true},  // the second, shorter
		{859, 1, 40, true},  // samples 0-7 back
		{860, 1, 40, true},  // 0-8 back: the last 8 are 1-8
		{960, 2, 45, true},  // 0-9 back, the last 8 are 2-9
		{1100, 3, 60, true}, // 3-10, all 60: a tie goes to the earliest
	} {
		off, rtt, ok := ClockEstimate(samples, c.at)
		if off != c.offset || rtt != c.rtt || ok != c.ok {
			t.Errorf("ClockEstimate at %d = %d, %d, %v; want %d, %d, %v", c.at, off, rtt, ok, c.offset, c.rtt, c.ok)
		}
	}
}

func TestTightest(t *testing.T) {
	ts := []int64{0, 10, 20, 25, 27, 60}
	for _, c := range []struct {
		limit int
		i     int
		span  int64
		ok    bool
	}{
		{0, 0, 0, true},   // one arrival spans nothing
		{1, 3, 2, true},   // 25, 27
		{2, 2, 7, true},   // 20, 25, 27
		{3, 1, 17, true},  // 10 .. 27
		{5, 0, 60, true},  // all
		{6, 0, 0, false},  // too few
		{-1, 0, 0, false}, // no such limit
	} {
		i, span, ok := Tightest(ts, c.limit)
		if i != c.i || span != c.span || ok != c.ok {
			t.Errorf("Tightest(limit %d) = %d, %d, %v; want %d, %d, %v", c.limit, i, span, ok, c.i, c.span, c.ok)
		}
	}
	// Against MaxInWindow: a window of w holds more than limit arrivals
	// exactly when the tightest span is under w.
	r := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		ts := randomArrivals(r)
		limit, w := r.IntN(20), 1+r.Int64N(300)
		_, span, ok := Tightest(ts, limit)
		if over := MaxInWindow(ts, w) > limit; over != (ok && span < w) {
			t.Fatalf("limit %d window %d: MaxInWindow %d, Tightest %d %v", limit, w, MaxInWindow(ts, w), span, ok)
		}
	}
}
