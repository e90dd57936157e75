package redisstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A round trip that trims removes, by the server's clock as it runs, the
// members scored more than a window and core.TrimSlack ago and those more
// than core.FutureBound ahead; it keeps the rest, and the members scored
// below zero (the marker, the meta values). On miniredis the server's
// clock is set, and the members lie a millisecond either side of each cut:
// a trim by a reading of the clock taken before (the last sample, as
// before) kept the first.
func TestTrimByTheServersClock(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, mr *miniredis.Miniredis) {
		ctx := context.Background()
		key := redistest.Key(t, "trim")
		x := core.Window{Key: key, Limit: 10, Interval: time.Second, W: 1_000_000}
		now, near := serverNow(t, c), int64(2_000_000) // a real server's clock moves on: cuts 2s apart
		if mr != nil {
			mr.SetTime(time.UnixMicro(now))
			near = 1_000
		}
		cut, future := now-x.W-core.TrimSlack, now+core.FutureBound
		zs := []redis.Z{
			{Score: float64(cut - near), Member: "old"}, {Score: float64(cut + near), Member: "counts"},
			{Score: float64(now), Member: "now"}, {Score: float64(future - near), Member: "ahead"},
			{Score: float64(future + near), Member: "garbage"}, {Score: -5, Member: "meta"},
		}
		if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
			t.Fatal(err)
		}
		s := NewStore(c, []core.Window{x}, 0, nil, "self")
		if _, err := s.Reserve(ctx, &core.Attempt{Lims: []int{x.Limit}, Upkeep: core.Upkeep{Trim: core.Trim{On: true}}}); err != nil {
			t.Fatal(err)
		}
		left, err := c.ZRange(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(left)
		if want := []string{"ahead", "counts", "meta", "now"}; !slices.Equal(left, want) {
			t.Fatalf("members left after the trim: %v, want %v", left, want)
		}
	})
}
