package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A compacted window whose hash another process made with another bucket
// width counts what CountScript counts: the round trip that finds the
// width reads the window again with the script, and the next ones name
// their fields from the width found.
func TestCompactedReadLearnsTheWidth(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		ctx := context.Background()
		key := redistest.Key(t, "width")
		x := core.Window{Key: key, Limit: 100_000, Interval: 10 * time.Second, W: 10_000_000, Bucket: 10_000, Age: 1_000}
		s := NewStore(c, []core.Window{x}, 0, nil, "self")
		now := serverNow(t, c)
		var zs []redis.Z
		for i := range 60 {
			zs = append(zs, redis.Z{Score: float64(now - 9_000_000 + int64(i)*37_000), Member: fmt.Sprint("c", i)})
		}
		if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
			t.Fatal(err)
		}
		const other = 7_000 // the width of the process that compacted first
		if err := CompactScript.Run(ctx, c, []string{key, CompactKey(key)}, other, x.Age, x.W+2_000_000, 60_000, BucketMember, CompactBatch, RebuildFrom, 0).Err(); err != nil {
			t.Fatal(err)
		}
		// A check whose window starts among the buckets: the count takes
		// some of them, and which depends on the width.
		g := now + 1_000_000 - 10
		for round := range 3 {
			a := &core.Attempt{Lims: []int{x.Limit}, Checks: []int64{g},
				Adds: []core.Entry{{Score: g, Member: fmt.Sprint("own", round)}}}
			r, err := s.Reserve(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			want, err := readCount(CountScript.Eval(ctx, c, []string{key, CompactKey(key)}, countArgs([]countRange{{g - x.W, g + x.W}}, nil, nil)...), 1, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Counts[0][0]; got != want.counts[0] {
				t.Fatalf("round %d: count %d, CountScript counts %d", round, got, want.counts[0])
			}
			if w := s.width[0].Load(); w != other {
				t.Fatalf("round %d: width %d in use, the hash's is %d", round, w, other)
			}
		}
	})
}
