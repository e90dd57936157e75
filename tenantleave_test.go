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
// scans of its last call, not a window later: while tenant b's last calls
// hold part of the window, a, capped at what b left it, fills the rest at
// once (seed 34192); and so it does in a window of 250ms, whose scans come
// every 25ms and the second that sees b short a quarter of that after the
// first. What it pins is the scan due as b's newest call leaves the
// window (core.TenantShares.Leaves): without it the emptiest window after
// b's last call held 23 of 40 in 1s windows and 34 in 250ms ones. The
// other wakes for a tenant that left (capsLeaveRoom, Drops, the quarter)
// are pinned by TestScanWake, TestCapsLeaveRoom and the simulator's seeds
// 55600, 56044, 56932, 58184 and 59224. In a synctest bubble: the times
// are the bubble's, exact.
func TestTenantThatLeavesGivesItsShareAtOnce(t *testing.T) {
	for _, interval := range []time.Duration{time.Second, 250 * time.Millisecond} {
		t.Run(interval.String(), func(t *testing.T) { testTenantLeaves(t, interval) })
	}
}

func testTenantLeaves(t *testing.T, interval time.Duration) {
	const limit = 40
	synctest.Test(t, func(t *testing.T) {
		th := throttlertest.New(t, limit, interval)
		start := time.Now()
		var (
			mu  sync.Mutex
			at  = map[string][]time.Duration{}
			wg  sync.WaitGroup
			end = start.Add(8 * interval)
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
		// From two scans after b's last call (the first to see b short
		// of its share and the next to see it still so) and a window's
		// scans' slack, to the run's last window a fills, every window
		// holds the limit but for the tenants' spare (2) and a unit: a
		// is capped at what b leaves it while b's calls stay in the
		// window, and alone after. The round that claims b's last queued
		// calls (b drained) wakes for the next scan; it slept a Quiet
		// before (500ms, toward a's slot a window on), and a window of
		// 1s ending 550ms after b's last call held 23. Now 38 in 19 runs
		// of 20, and 37 (a's claims a scan later) in one.
		// Windows of the interval and the default buffer, ending every
		// thousandth of the interval, half of one off the times the
		// calls come at (a call admitted as the one it takes the place
		// of leaves comes a few µs after it: the window that ends
		// between the two is a few µs long), until the last a fills.
		worst, when, span := limit, time.Duration(0), interval+50*time.Millisecond
		for t0 := last + interval*55/100 + interval/2000; t0 <= end.Sub(start)-interval/10; t0 += interval / 1000 {
			held := 0
			for _, a := range all {
				if a > t0-span && a <= t0 {
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
