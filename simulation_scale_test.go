package throttler

import (
	"flag"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-throttler/throttler/internal/sim"
)

var simScale = flag.String("sim.scale", "", `simulation: run the named fixed scenario ("hour", "herd", "herd-faults", "herd3" or "all") and print its figures`)

// TestSimulationScale runs the fixed scenarios of sim.Scale, checks what
// every seed's run must hold (the invariant, idle Throttlers, no member
// left behind) and prints their figures, the longest wait among them: the
// table of simulated figures in docs/simulator.md comes from
//
//	go test -run TestSimulationScale -sim.scale all -v .
//
// It runs only when -sim.scale names a scenario.
func TestSimulationScale(t *testing.T) {
	if *simScale == "" {
		t.Skip("-sim.scale names no scenario")
	}
	names := []string{*simScale}
	if *simScale == "all" {
		names = sim.Scales
	}
	for _, name := range names {
		sc, ok := sim.Scale(name)
		if !ok {
			t.Fatalf("-sim.scale %q: no such scenario (%v or all)", name, sim.Scales)
		}
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			var f simFigures
			// Deferred: synctest.Test ends this test at once when a check
			// failed inside the bubble, and the figures matter most then.
			defer func() {
				t.Logf("%s\n%s; %s of real time", sc, f, time.Since(start).Round(time.Millisecond))
			}()
			synctest.Test(t, func(t *testing.T) {
				w := newSimWorld(t, sc)
				defer w.close()
				w.run()
				w.checkSafety()
				f = w.figures()
			})
		})
	}
}

// simFigures are a run's figures.
type simFigures struct {
	admitted    int
	utilization float64 // of limit*interval/(interval+buffer), over steady state
	jain        float64 // of units admitted per live replica over steady state
	jain9       float64 // the least Jain of those over 9-second spans of it (the bench's herd measures 9s)
	p50, p99    time.Duration
	longest     time.Duration // the longest wait of a call without deadline
	bound       time.Duration // the bound a calm seed's run is held to (see maxWait)
	roundTrips  float64       // per admitted call
	commands    float64       // per admitted call
}

func (f simFigures) String() string {
	return fmt.Sprintf("admitted %d calls; utilization %.4f; Jain %.4f across live replicas (at least %.4f over 9s); wait p50 %s, p99 %s, longest %s (a calm seed's bound: %s); %.2f round trips and %.2f Redis commands per admission",
		f.admitted, f.utilization, f.jain, f.jain9, f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond),
		f.longest.Round(time.Millisecond), f.bound.Round(time.Millisecond), f.roundTrips, f.commands)
}

// figures measures a finished run. Fairness and utilization count the
// steady state only: from one window after the first admission to one
// window before the traffic ends.
func (w *simWorld) figures() simFigures {
	adms := w.rec.Admissions()
	f := simFigures{admitted: len(adms), longest: w.longest, bound: w.maxWait()}
	if len(adms) == 0 {
		return f
	}
	f.utilization, _ = w.utilization(adms)
	from, to := adms[0].At+w.sc.W(), w.sc.Run-w.sc.W()
	units := make([]float64, len(w.reps)) // per replica, whichever of its processes admitted them
	link := map[int]int{}
	for _, r := range slices.Concat(w.old, w.reps) {
		link[r.id] = r.link
	}
	var waits []time.Duration
	for _, a := range adms {
		if a.At >= from && a.At < to {
			units[link[a.Replica]] += float64(a.N)
		}
		if a.NoLimit {
			waits = append(waits, a.Waited)
		}
	}
	jain := func(units []float64) float64 {
		var sum, sq float64
		live := 0
		for i, u := range units {
			if w.reps[i].dead.Load() {
				continue
			}
			live++
			sum += u
			sq += u * u
		}
		if sq == 0 {
			return 0
		}
		return sum * sum / (float64(live) * sq)
	}
	f.jain = jain(units)
	const span = 9 * time.Second
	f.jain9 = f.jain
	for at := from; at+span <= to; at += span {
		in := make([]float64, len(w.reps))
		for _, a := range adms {
			if a.At >= at && a.At < at+span {
				in[link[a.Replica]] += float64(a.N)
			}
		}
		if j := jain(in); j > 0 { // a span with no admission says nothing of fairness
			f.jain9 = min(f.jain9, j)
		}
	}
	slices.Sort(waits)
	if len(waits) > 0 {
		f.p50 = waits[len(waits)/2]
		f.p99 = waits[min(len(waits)-1, len(waits)*99/100)]
	}
	var rt uint64
	for _, r := range w.reps {
		rt += r.th.Stats().Redis.RoundTrips
	}
	f.roundTrips = float64(rt) / float64(len(adms))
	f.commands = float64(w.net.Commands()) / float64(len(adms))
	return f
}
