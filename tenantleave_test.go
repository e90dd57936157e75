package throttler_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/throttlertest"
)

// A tenant that leaves gives its share to the tenant left within two
// scans of its last call, not a window later: while
// tenant b's last calls hold part of the window, a, capped at what b left
// it, fills the rest at once (seed 34192). In a synctest bubble: the times
// are the bubble's, exact.
func TestTenantThatLeavesGivesItsShareAtOnce(t *testing.T) {
	const limit, interval = 40, time.Second
	synctest.Test(t, func(t *testing.T) {
		th := throttlertest.New(t, limit, interval)
		start := time.Now()
		var (
			mu  sync.Mutex
			at  = map[string][]time.Duration{}
			wg  sync.WaitGroup
			end = start.Add(5 * interval)
		)
		call := func(tenant string, until time.Time) {
			ctx := throttler.ContextWithTenant(t.Context(), tenant)
			for time.Now().Before(until) {
				if err := th.Wait(ctx); err != nil {
					t.Errorf("%s: %v", tenant, err)
					return
				}
				mu.Lock()
				at[tenant] = append(at[tenant], time.Since(start))
				mu.Unlock()
			}
		}
		for range 20 {
			wg.Go(func() { call("a", end) })
		}
		for range 4 {
			wg.Go(func() { call("b", start.Add(2*interval+interval/2)) })
		}
		wg.Wait()

		all := append(append([]time.Duration(nil), at["a"]...), at["b"]...)
		last := at["b"][len(at["b"])-1]
		// From two scans (105ms apart here) after b's last call, the first
		// to see b short of its share and the next to see it still so,
		// and a window's scans' slack, until the run ends, every window
		// holds the limit but for the tenants' spare (2) and a unit: a is
		// capped at what b leaves it while b's calls stay in the window,
		// and alone after. The round that claims b's last queued calls (b
		// drained) wakes for the next scan; it slept a Quiet before
		// (500ms, toward a's slot a window on), and a window ending 550ms
		// after b's last call held 23. Now 38 in 19 runs of 20, and 37
		// (a's claims a scan later) in one.
		worst, when := limit, time.Duration(0)
		for t0 := last + 550*time.Millisecond; t0 <= 4*interval; t0 += time.Millisecond {
			held := 0
			for _, a := range all {
				if a > t0-interval && a <= t0 {
					held++
				}
			}
			if held < worst {
				worst, when = held, t0
			}
		}
		t.Logf("b's last call at %s; the emptiest window after it held %d of %d, ending at %s", last, worst, limit, when)
		if worst < limit-3 {
			t.Errorf("a window ending at %s held %d calls of a limit of %d, with a waiting: b's share stayed free after it left (at %s)", when, worst, limit, last)
		}
	})
}
