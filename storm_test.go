package throttler

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestCancellationStorm: hundreds of Waits under saturation whose deadlines
// (10-500ms) often fall before their slot. Each either is admitted or
// returns an error that is context.DeadlineExceeded; the limit holds; and no
// member of an abandoned call is left in the set. (How promptly they return
// is measured by BenchmarkCancellationStorm.)
func TestCancellationStorm(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const (
			limit    = 10
			interval = 100 * time.Millisecond
		)
		var rec recorder
		ths := []*Throttler{
			rec.watch(mustNew(t, dial(), key, limit, interval)),
			rec.watch(mustNew(t, dial(), key, limit, interval)),
		}
		var wg sync.WaitGroup
		for i := range 300 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := time.Duration(10+rand.IntN(490)) * time.Millisecond
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				err := ths[i%2].Wait(ctx)
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Wait with a %s deadline: %v", d, err)
				}
			}()
		}
		wg.Wait()
		for _, th := range ths {
			waitIdle(t, th)
		}
		assertWindow(t, rec.scores(), interval+50*time.Millisecond, limit)
		ours := rec.members()
		for m := range keyMembers(t, dial(), key) {
			if !ours[m] {
				t.Errorf("member %x left in the set by an abandoned call", m)
			}
		}
		t.Logf("%d of 300 admitted", len(rec.scores()))
	})
}
