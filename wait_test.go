package throttler

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A reservation is one value: a call admitted to go as soon as the reply
// is back, then sent back to the queue (a shared pause arrived before it
// went) and admitted again by another path (here FailOpen's, Redis having
// failed meanwhile) for a later time, goes at that later time, not at once
// as its first admission said.
func TestRequeuedImmediateCallWaitsForItsNewSlot(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	defer c.Close()
	th := mustNew(t, c, "k", 10, time.Second, WithLogger(quiet), WithFailurePolicy(FailOpen()))
	const pause = 300 * time.Millisecond
	var pauseEnd time.Time
	th.onAdmit = func(int64, []string) {
		if !pauseEnd.IsZero() {
			return
		}
		// The reply admitting the call is being applied: another process's
		// pause lands now, and Redis goes away.
		pauseEnd = th.now().Add(pause)
		th.shared.pausedTill = th.clock.server(pauseEnd)
		mr.SetError("injected: Redis is down")
	}
	if err := th.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if now := th.now(); now.Before(pauseEnd) {
		t.Fatalf("Wait returned %s before the pause it was sent back for ended", pauseEnd.Sub(now))
	}
	mr.SetError("")
	waitIdle(t, th)
}
