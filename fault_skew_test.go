package throttler

import (
	"math"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/go-throttler/throttler/internal/replica"
)

// TestFaultClockSkew: three replica processes whose local clocks are 5s
// behind, 5s ahead and right keep the key saturated: the limit holds, and
// they share it fairly.
func TestFaultClockSkew(t *testing.T) {
	const (
		limit      = 20
		interval   = 500 * time.Millisecond
		buffer     = 50 * time.Millisecond
		goroutines = 6
		run        = 3 * time.Second
	)
	srv := redistest.Start(t)
	f := newFleet(t, srv, replica.Config{Limit: limit, Interval: interval, Buffer: buffer, Goroutines: goroutines})
	var ids []string
	for _, skew := range []time.Duration{-5 * time.Second, 5 * time.Second, 0} {
		p := f.start(func(c *replica.Config) { c.Skew = skew })
		ids = append(ids, p.cfg.ID)
	}
	// Fairness is measured once all three are running.
	var from time.Time
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		all := true
		for _, p := range f.procs {
			all = all && !p.firstAdmit.IsZero()
		}
		f.mu.Unlock()
		if all {
			from = time.Now().Add(200 * time.Millisecond)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not every replica was admitted within 20s")
		}
	}
	time.Sleep(time.Until(from.Add(run)))
	to := time.Now()
	f.stopAll()
	o := f.verify()
	counts := f.api.countBetween(ids, from, to)
	sum, sq := 0.0, 0.0
	for _, n := range counts {
		sum += float64(n)
		sq += float64(n) * float64(n)
	}
	jain := 0.0
	if sq > 0 {
		jain = sum * sum / (float64(len(counts)) * sq)
	}
	if jain < 0.9 || math.IsNaN(jain) {
		t.Errorf("Jain fairness index %.3f of the calls per replica %v (skews -5s, +5s, 0), want >= 0.9", jain, counts)
	}
	t.Logf("outcome: skews -5s/+5s/0: %s; calls per replica in %s: %v, Jain index %.3f", o, run, counts, jain)
}
