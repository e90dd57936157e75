package throttler

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/go-throttler/throttler/internal/replica"
)

// TestFaultRedisRestartHeals: three replica processes, calling the API through
// the Throttler's RoundTripper, keep the key saturated while redis-server is
// killed and restarted empty three times. The replicas heal the lost window:
// no window over the limit at the API or over the scores.
func TestFaultRedisRestartHeals(t *testing.T) {
	redistest.Long(t)
	const (
		limit      = 20
		interval   = 500 * time.Millisecond
		buffer     = 50 * time.Millisecond
		goroutines = 6
	)
	srv := redistest.Start(t)
	f := newFleet(t, srv, replica.Config{Limit: limit, Interval: interval, Buffer: buffer, Goroutines: goroutines, RoundTripper: true})
	for range 3 {
		f.start(nil)
	}
	f.waitAdmitted(2*limit, 20*time.Second)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("restart schedule seed %d", seed)
		}
	})
	var pauses []string
	for range 3 {
		time.Sleep(time.Duration(1000+rng.IntN(400)) * time.Millisecond)
		killAt := time.Now()
		srv.Restart(t)
		upAt := time.Now()
		// The pause: from the kill to the first admission decided by the
		// new server.
		var first time.Time
		for deadline := upAt.Add(5 * time.Second); first.IsZero() && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			f.mu.Lock()
			for _, a := range f.admits {
				if a.seen.After(upAt) && (first.IsZero() || a.seen.Before(first)) {
					first = a.seen
				}
			}
			f.mu.Unlock()
		}
		if first.IsZero() {
			t.Fatalf("no admission within 5s of a restart")
		}
		pauses = append(pauses, fmt.Sprintf("%s (restart %s)", first.Sub(killAt).Round(time.Millisecond), upAt.Sub(killAt).Round(time.Millisecond)))
	}
	time.Sleep(1500 * time.Millisecond)
	f.stopAll()
	o := f.verify()
	t.Logf("outcome: 3 restarts; %s; admissions paused after each restart for %s", o, strings.Join(pauses, ", "))
}
