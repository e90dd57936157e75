package throttler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A process that made no round trip for longer than futureBound knows the
// server's clock only from its last reply, an hour and more behind. Its
// next trim must still spare what other processes reserved since:
// trimming "beyond an hour ahead" from that stale reading removed every
// live member, and its call was admitted into a full window (simulation
// seed 663, where a process thought for 2h24m between calls).
func TestIdleProcessTrimsNothingLive(t *testing.T) {
	mr := miniredis.RunT(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var elapsed atomic.Int64
	clock := func() time.Time { return base.Add(time.Duration(elapsed.Load())) }
	advance := func(d time.Duration) {
		elapsed.Add(int64(d))
		mr.SetTime(clock())
	}
	mr.SetTime(base)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	ctx := context.Background()
	idle := mustNew(t, c, "k", 2, 2*time.Hour, WithClock(clock))
	busy := mustNew(t, c, "k", 2, 2*time.Hour, WithClock(clock))

	if r, err := idle.Allow(ctx); err != nil || !r.Allowed {
		t.Fatalf("first call: %+v, %v", r, err)
	}
	advance(90 * time.Minute)
	if r, err := busy.Allow(ctx); err != nil || !r.Allowed {
		t.Fatalf("second call: %+v, %v", r, err)
	}
	// The window of 2h now holds 2 calls: the idle process, back after
	// 90 minutes, must be refused.
	if r, err := idle.Allow(ctx); err != nil || r.Allowed {
		t.Fatalf("third call in a full window: %+v, %v; want refused", r, err)
	}
	if n := len(mr.Keys()); n != 1 {
		t.Fatalf("keys %v", mr.Keys())
	}
	// Calls are scored at their time (server µs); the members kept beside
	// them (the marker, meta values) at or below zero. A call's member may
	// begin with any byte, a zero one included.
	members, err := c.ZRangeWithScores(ctx, "k", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, m := range members {
		if m.Score > 0 {
			calls++
		}
	}
	if calls != 2 {
		t.Fatalf("%d calls left in the set, want 2: %v", calls, members)
	}
}
