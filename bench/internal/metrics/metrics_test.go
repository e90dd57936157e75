package metrics

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestJain(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 1},
		{[]float64{0, 0}, 1},
		{[]float64{5}, 1},
		{[]float64{3, 3, 3}, 1},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{1, 2}, 9.0 / 10},
		{[]float64{10, 20, 30}, 3600.0 / (3 * 1400)},
	} {
		if got := Jain(c.xs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

func TestStrictRejects(t *testing.T) {
	for _, c := range []struct {
		name   string
		ts     []int64
		limit  int
		window int64
		want   int
	}{
		{"empty", nil, 2, 10, 0},
		{"under", []int64{0, 1, 2}, 3, 10, 0},
		{"one over", []int64{0, 1, 2, 3}, 3, 10, 1},
		{"window boundary frees a slot", []int64{0, 1, 2, 10}, 3, 10, 0},
		{"just inside the window", []int64{0, 1, 2, 9}, 3, 10, 1},
		// 6 is rejected and does not count: at 12 the window (2, 12] holds
		// one accepted call (5), so 12 is accepted (it would not be if 6
		// had counted).
		{"rejected calls do not count", []int64{0, 5, 6, 12}, 2, 10, 1},
		{"same instant", []int64{5, 5, 5, 5, 5}, 2, 10, 3},
		{"limit one", []int64{0, 9, 10, 19, 20}, 1, 10, 2},
	} {
		if got := StrictRejects(c.ts, c.limit, c.window); got != c.want {
			t.Errorf("%s: StrictRejects(%v, %d, %d) = %d, want %d", c.name, c.ts, c.limit, c.window, got, c.want)
		}
	}
}

// bruteRejects simulates the strict API the slow way.
func bruteRejects(ts []int64, limit int, window int64) int {
	var acc []int64
	rej := 0
	for _, t := range ts {
		n := 0
		for _, a := range acc {
			if a > t-window && a <= t {
				n++
			}
		}
		if n >= limit {
			rej++
		} else {
			acc = append(acc, t)
		}
	}
	return rej
}

func bruteMax(ts []int64, window int64) int {
	best := 0
	for _, end := range ts {
		n := 0
		for _, a := range ts {
			if a > end-window && a <= end {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

func randomArrivals(r *rand.Rand) []int64 {
	ts := make([]int64, r.IntN(200))
	for i := range ts {
		ts[i] = r.Int64N(1000)
	}
	slices.Sort(ts)
	return ts
}

func TestAgainstBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		ts := randomArrivals(r)
		limit, window := 1+r.IntN(20), 1+r.Int64N(300)
		if got, want := StrictRejects(ts, limit, window), bruteRejects(ts, limit, window); got != want {
			t.Fatalf("case %d: StrictRejects = %d, brute force %d (limit %d window %d)", i, got, want, limit, window)
		}
		if got, want := MaxInWindow(ts, window), bruteMax(ts, window); got != want {
			t.Fatalf("case %d: MaxInWindow = %d, brute force %d (window %d)", i, got, want, window)
		}
		// A run no window of which exceeds the limit has nothing to reject.
		if MaxInWindow(ts, window) <= limit && StrictRejects(ts, limit, window) != 0 {
			t.Fatalf("case %d: max in window within the limit but rejects counted", i)
		}
	}
}

func TestMaxInWindow(t *testing.T) {
	for _, c := range []struct {
		ts     []int64
		window int64
		want   int
	}{
		{nil, 10, 0},
		{[]int64{0}, 10, 1},
		{[]int64{0, 10, 20}, 10, 1},
		{[]int64{0, 9, 18}, 10, 2},
		{[]int64{0, 1, 2, 3, 50, 51}, 10, 4},
		{[]int64{7, 7, 7}, 1, 3},
		{[]int64{1, 2}, 0, 0},
	} {
		if got := MaxInWindow(c.ts, c.window); got != c.want {
			t.Errorf("MaxInWindow(%v, %d) = %d, want %d", c.ts, c.window, got, c.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	xs := []int64{50, 10, 40, 20, 30} // sorted: 10 20 30 40 50
	for _, c := range []struct {
		p    float64
		want int64
	}{
		{1, 10}, {20, 10}, {21, 20}, {50, 30}, {60, 30}, {61, 40}, {99, 50}, {100, 50},
	} {
		if got := Percentile(xs, c.p); got != c.want {
			t.Errorf("Percentile(%v) = %d, want %d", c.p, got, c.want)
		}
	}
	if !slices.Equal(xs, []int64{50, 10, 40, 20, 30}) {
		t.Errorf("Percentile modified its input: %v", xs)
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %d, want 0", got)
	}
	hundred := make([]int64, 100)
	for i := range hundred {
		hundred[i] = int64(i + 1)
	}
	if got := Percentile(hundred, 99); got != 99 {
		t.Errorf("p99 of 1..100 = %d, want 99", got)
	}
	if got := Percentile(hundred, 50); got != 50 {
		t.Errorf("p50 of 1..100 = %d, want 50", got)
	}
}

func TestCountInAndRolling(t *testing.T) {
	ts := []int64{0, 5, 10, 10, 15, 25}
	if got := CountIn(ts, 5, 15); got != 3 {
		t.Errorf("CountIn[5,15) = %d, want 3", got)
	}
	if got := CountIn(ts, 0, 100); got != 6 {
		t.Errorf("CountIn[0,100) = %d, want 6", got)
	}
	// Windows (t-10, t] for t = 5, 10, ..., 25.
	got := Rolling(ts, 10, 5, 25)
	// (-5,5]={0,5} (0,10]={5,10,10} (5,15]={10,10,15} (10,20]={15} (15,25]={25}
	want := []int{2, 3, 3, 1, 1}
	if !slices.Equal(got, want) {
		t.Errorf("Rolling = %v, want %v", got, want)
	}
}

func TestMeanInWindow(t *testing.T) {
	// Steady: one arrival per unit, window 10: the window always holds 10.
	var steady []int64
	for i := int64(-20); i < 200; i++ {
		steady = append(steady, i)
	}
	if got := MeanInWindow(steady, 10, 0, 100); math.Abs(got-10) > 1e-9 {
		t.Errorf("steady: MeanInWindow = %v, want 10", got)
	}
	// Bursts of 5 every 12 units, window 10: full (5) for 10 of every 12.
	var bursts []int64
	for b := int64(0); b < 120; b += 12 {
		for range 5 {
			bursts = append(bursts, b)
		}
	}
	if got, want := MeanInWindow(bursts, 10, 0, 120), 5*10.0/12; math.Abs(got-want) > 1e-9 {
		t.Errorf("bursts: MeanInWindow = %v, want %v", got, want)
	}
	if got := MeanInWindow(bursts, 10, 5, 5); got != 0 {
		t.Errorf("empty span: %v", got)
	}
	// Against sampling the rolling count.
	r := rand.New(rand.NewPCG(3, 4))
	for range 50 {
		ts := randomArrivals(r)
		window := 1 + r.Int64N(200)
		from := r.Int64N(500)
		to := from + 1 + r.Int64N(500)
		var sum float64
		for t := from; t < to; t++ {
			// Integer arrivals: the count over [t, t+1) is that of (t-window, t].
			sum += float64(CountIn(ts, t-window+1, t+1))
		}
		if got, want := MeanInWindow(ts, window, from, to), sum/float64(to-from); math.Abs(got-want) > 1e-9 {
			t.Fatalf("MeanInWindow = %v, sampled %v", got, want)
		}
	}
}

func TestConcurrent(t *testing.T) {
	spans := []Span{{0, 10}, {5, 15}, {10, 20}, {12, 13}}
	// At 12: [5,15), [10,20) and [12,13): 3; [0,10) ended at 10 before
	// [10,20) began.
	if got := MaxConcurrent(spans); got != 3 {
		t.Errorf("MaxConcurrent(%v) = %d, want 3", spans, got)
	}
	if got := MaxConcurrent(nil); got != 0 {
		t.Errorf("MaxConcurrent(nil) = %d, want 0", got)
	}
	// Over [0, 20): 10 + 10 + 10 + 1 = 31 span-units in 20.
	if got := MeanConcurrent(spans, 0, 20); got != 31.0/20 {
		t.Errorf("MeanConcurrent over [0,20) = %v, want %v", got, 31.0/20)
	}
	// Clipped to [10, 15): 0 + 5 + 5 + 1 = 11 in 5.
	if got := MeanConcurrent(spans, 10, 15); got != 11.0/5 {
		t.Errorf("MeanConcurrent over [10,15) = %v, want %v", got, 11.0/5)
	}
	if got := MeanConcurrent(spans, 5, 5); got != 0 {
		t.Errorf("MeanConcurrent over an empty span = %v, want 0", got)
	}
}
