package throttlertest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/throttlertest"
)

// syncAll is the code under test, as a user's service would have it: it
// makes n calls to an API whose quota th holds, waiting for each.
func syncAll(ctx context.Context, th *throttler.Throttler, n int) (made int, err error) {
	for range n {
		if err := th.Wait(ctx); err != nil {
			return made, err
		}
		made++ // the call to the API would go here
	}
	return made, nil
}

// 150 calls at 100 an hour wait past a whole window: the 101st call goes
// an hour after the first. In a bubble the hour is virtual: the test sees
// it pass, and takes milliseconds of wall time (go test -v prints them).
func TestSyncAllWaitsPastAWindow(t *testing.T) {
	wall := time.Now()
	synctest.Test(t, func(t *testing.T) {
		th := throttlertest.New(t, 100, time.Hour)
		start := time.Now()
		made, err := syncAll(t.Context(), th, 150)
		if err != nil || made != 150 {
			t.Fatalf("syncAll: %d calls, %v", made, err)
		}
		if waited := time.Since(start); waited < time.Hour {
			t.Errorf("150 calls at 100 an hour took %s, want at least an hour", waited)
		} else {
			t.Logf("150 calls at 100 an hour took %s of the bubble's time", waited.Round(time.Millisecond))
		}
	})
	t.Logf("wall time: %s", time.Since(wall).Round(time.Millisecond))
}
