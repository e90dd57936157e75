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

// A compacted window read without CountScript counts what the script
// counts: from a copy of its buckets taken when it has none (in the width
// the hash has, here another process's), reused while the stamp stands,
// and read again with the script, and taken anew, once another compaction
// moved calls out of the set, or a range starts past the totals it holds.
func TestCompactedReadFromACopy(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		ctx := context.Background()
		key := redistest.Key(t, "copy")
		x := core.Window{Key: key, Limit: 100_000, Interval: 10 * time.Second, W: 10_000_000, Bucket: 10_000, Age: 1_000}
		s := NewStore(c, []core.Window{x}, 0, nil, "self")
		// The scores are placed from 5s after the server's time, as if it
		// were read then: the compactions drop a bucket once it is 12s
		// old by the server's clock, and on miniredis under the race
		// detector the steps take seconds (5.3s in a CI that failed: the
		// first calls' buckets were dropped before the later range, which
		// then counted from the base, and took no new copy).
		now := serverNow(t, c) + 5_000_000
		add := func(name string, from int64) {
			var zs []redis.Z
			for i := range 60 {
				zs = append(zs, redis.Z{Score: float64(from + int64(i)*37_000), Member: fmt.Sprint(name, i)})
			}
			if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		const other = 7_000 // the width of the process that compacted first
		compact := func() {
			if err := CompactScript.Run(ctx, c, []string{key, CompactKey(key)}, other, x.Age, x.W+2_000_000, 60_000, BucketMember, CompactBatch, RebuildFrom, 0, StampMember, DenseBucket).Err(); err != nil {
				t.Fatal(err)
			}
		}
		add("c", now-9_000_000)
		compact()
		// A check whose window starts among the buckets: the count takes
		// some of them, and which depends on the width.
		g := now + 1_000_000 - 10
		var last *bucketCopy
		for round, step := range []string{"no copy", "the copy", "another stamp", "the new copy", "a later range", "an older process's compaction"} {
			switch step {
			case "another stamp":
				add("d", now-8_000_000) // members, moved by the compaction
				compact()
			case "a later range":
				g += (CopySpan + 10) * other // past the totals the copy holds
			case "an older process's compaction":
				// A CompactScript that knows no stamp: the flag tells.
				stamp, err := c.ZScore(ctx, key, StampMember).Result()
				if err != nil {
					t.Fatal(err)
				}
				add("e", now-7_500_000)
				compact()
				if err := c.ZAdd(ctx, key, redis.Z{Score: stamp, Member: StampMember}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			a := &core.Attempt{Lims: []int{x.Limit}, Checks: []int64{g},
				Adds: []core.Entry{{Score: g, Member: fmt.Sprint("own", round)}}}
			r, err := s.Reserve(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			want, err := readCount(CountScript.Eval(ctx, c, []string{key, CompactKey(key)}, countArgs([]countRange{{g - x.W, g + x.W}}, nil, nil, peakAsk{})...), 1, 0, false, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Counts[0][0]; got != want.counts[0] {
				t.Fatalf("%s: count %d, CountScript counts %d", step, got, want.counts[0])
			}
			cp := s.keys[0].buckets.copy.Load()
			stamp, err := c.ZScore(ctx, key, StampMember).Result()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case cp == nil || cp.b != other || cp.stamp[0] != stamp:
				t.Fatalf("%s: copy %+v, want one of width %d at stamp %v", step, cp, other, stamp)
			case (step == "the copy" || step == "the new copy") != (cp == last):
				t.Fatalf("%s: the copy was taken again: %v", step, cp != last)
			}
			last = cp
		}
	})
}
