package throttler

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A process that only calls Allow still writes to Redis what it owes it: a
// refused call whose members could not be removed at once has them removed
// by a round trip of their own, not left in the window until the key
// expires, refusing calls that would fit.
func TestAllowOnlyGivesBackAfterFailedRelease(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		th := mustNew(t, c, key, 1, time.Hour, WithLogger(quiet))
		fs := withFaults(th)
		ctx := context.Background()
		if res, err := th.Allow(ctx); err != nil || !res.Allowed {
			t.Fatalf("first Allow: (%+v, %v), want allowed", res, err)
		}
		fs.failRemove.Store(1)
		if res, err := th.Allow(ctx); err != nil || res.Allowed {
			t.Fatalf("second Allow on a limit of 1: (%+v, %v), want refused", res, err)
		}
		waitIdle(t, th)
		if n := len(keyMembers(t, c, key)); n != 1 {
			t.Fatalf("after the refused call's release failed, the window holds %d members once the Throttler is idle, want 1", n)
		}
	})
}

// A process that only calls Allow notices that Redis lost the window (a
// restart without persistence, here a flush) and refuses until every call
// the lost window held has stopped counting, rather than admit a limit's
// worth again.
func TestAllowOnlyNoticesLostWindow(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	th := mustNew(t, c, "k", 2, time.Hour, WithLogger(quiet))
	ctx := context.Background()
	for i := range 2 {
		if res, err := th.Allow(ctx); err != nil || !res.Allowed {
			t.Fatalf("Allow #%d: (%+v, %v), want allowed", i, res, err)
		}
	}
	mr.FlushAll()
	for i := range 3 {
		res, err := th.Allow(ctx)
		if err != nil || res.Allowed {
			t.Fatalf("Allow #%d after Redis lost a full window: (%+v, %v), want refused", i, res, err)
		}
		if res.RetryAfter < 59*time.Minute {
			t.Fatalf("Allow #%d after the loss: RetryAfter %s, want about the hour the lost calls still count", i, res.RetryAfter)
		}
	}
	if s := th.Stats(); s.Pauses == 0 {
		t.Fatalf("Stats after the loss: %+v, want a pause (the heal)", s)
	}
	waitIdle(t, th)
}
