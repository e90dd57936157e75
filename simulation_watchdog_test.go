package throttler

import (
	"testing"
	"testing/synctest"

	"github.com/go-throttler/throttler/internal/core"
)

// A planted bug, free slots computed 5% of a window early, has claims at
// the early slots refused and claimed again round trip after round trip
// without virtual time moving; the network's watchdog names it as a
// livelock, and the run ends, rather than running on in wall time until go
// test's timeout with no seed reported. The watchdog trips here at 1,000
// requests within a virtual millisecond, for a short test (the runs trip
// at sim.LivelockRoundTrips).
func TestSimulationWatchdogNamesALivelock(t *testing.T) {
	core.PlantEarlySlots = 50
	defer func() { core.PlantEarlySlots = 0 }()
	for _, seed := range simWatchdogSeeds {
		synctest.Test(t, func(t *testing.T) {
			w := newSimWorld(t, simScenario(seed))
			defer w.close()
			w.net.SetLivelockRoundTrips(1_000)
			w.run()
			if msg := w.net.Livelock(); msg == "" {
				t.Errorf("seed %d (%s): no livelock called with free slots 5%% early", seed, w.sc)
			} else {
				t.Logf("seed %d: %s", seed, msg)
			}
		})
	}
}

// simWatchdogSeeds are seeds whose runs livelock with the planted bug.
var simWatchdogSeeds = []uint64{2}
