package sim

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestOverfullAgainstBruteForce checks Overfull against every window that
// starts at an admission, counted the slow way, on random admissions.
func TestOverfullAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 2000 {
		interval := time.Duration(1+rng.IntN(10)) * time.Millisecond
		limit, share := 1+rng.IntN(6), rng.IntN(3)
		var adms []Admission
		at := time.Duration(0)
		for range rng.IntN(30) {
			at += time.Duration(rng.IntN(3)) * time.Millisecond / 2
			adms = append(adms, Admission{At: at, Replica: rng.IntN(3), N: 1 + rng.IntN(3),
				Exempt: rng.IntN(8) == 0, Local: rng.IntN(3) == 0})
		}
		worst := 0 // the most any window holds over what it may
		for _, a := range adms {
			units, local := 0, map[int]bool{}
			for _, b := range adms {
				if !b.Exempt && b.At >= a.At && b.At < a.At+interval {
					units += b.N
					if b.Local {
						local[b.Replica] = true
					}
				}
			}
			if a.Exempt {
				continue // a window worth checking starts at a counted admission
			}
			worst = max(worst, units-(limit+share*len(local)))
		}
		v := Overfull("k", adms, interval, limit, share)
		switch {
		case worst > 0 && v == nil:
			t.Fatalf("run %d: a window holds %d more than it may; Overfull found none", run, worst)
		case worst <= 0 && v != nil:
			t.Fatalf("run %d: no window holds more than it may; Overfull says %s", run, v)
		case v != nil && v.Units-v.Limit != worst:
			t.Fatalf("run %d: Overfull's window holds %d over, the worst holds %d over", run, v.Units-v.Limit, worst)
		}
	}
}

// A window exactly interval long holds calls at its start, not at its end:
// two calls one interval apart never share one.
func TestOverfullHalfOpen(t *testing.T) {
	adms := []Admission{{At: 0, N: 1}, {At: time.Second, N: 1}}
	if v := Overfull("k", adms, time.Second, 1, 0); v != nil {
		t.Fatalf("calls an interval apart: %s", v)
	}
	adms[1].At--
	if v := Overfull("k", adms, time.Second, 1, 0); v == nil || v.Units != 2 {
		t.Fatalf("calls 1ns less than an interval apart: got %v, want a window of 2", v)
	}
}

// At the API, a call made at its admission arrives a way later, and a
// request at its arrival: a request written late joins the next window's
// calls there, where Overfull, which skips requests, sees nothing.
func TestOverfullAtAPI(t *testing.T) {
	const way = 3 * time.Millisecond
	adms := []Admission{
		{At: 0, N: 1},
		{At: 0, N: 1, Sent: true, Arrive: 7*time.Millisecond + way}, // handed over at 0, written 7ms late
		{At: 10 * time.Millisecond, N: 1},
		{At: 10 * time.Millisecond, N: 1, Sent: true, Arrive: 10*time.Millisecond + way},
	}
	if v := Overfull("k", adms, 10*time.Millisecond, 2, 0); v != nil {
		t.Fatalf("admissions: %s, want none over", v)
	}
	v := OverfullAtAPI("k", adms, 10*time.Millisecond, 2, 0, way)
	if v == nil || v.Units != 3 || v.From != 7*time.Millisecond+way || !v.AtAPI {
		t.Fatalf("at the API: got %v, want the window from 10ms holding 3", v)
	}
	// The same calls all written on time: a way the same for all moves
	// every window alike.
	adms[1].Arrive = way
	if v := OverfullAtAPI("k", adms, 10*time.Millisecond, 2, 0, way); v != nil {
		t.Fatalf("written on time: %s, want none over", v)
	}
	// Debt and exempt calls are skipped there too.
	adms[1].Arrive, adms[1].Debt = 7*time.Millisecond+way, true
	if v := OverfullAtAPI("k", adms, 10*time.Millisecond, 2, 0, way); v != nil {
		t.Fatalf("the late request counted as debt: %s, want none over", v)
	}
}
