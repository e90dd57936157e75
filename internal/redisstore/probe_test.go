package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Every probe of an attempt is looked up, wherever the store reads it: with
// the first key's meta members, in the longest key of its own, or by the
// CountScript of a compacted longest key; and the reply says which are
// gone, in the attempt's order.
func TestProbesReadEveryWay(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		ctx := context.Background()
		for _, layout := range []string{"first", "own key", "compacted", "compacted first"} {
			t.Run(layout, func(t *testing.T) {
				key := redistest.Key(t, "probes")
				short := core.Window{Key: key + ":s", Limit: 10, Interval: time.Second, W: 1_000_000}
				long := core.Window{Key: key + ":l", Limit: 100, Interval: time.Minute, W: 60_000_000}
				wins, in := []core.Window{long}, 0
				switch layout {
				case "own key":
					wins, in = []core.Window{short, long}, 1
				case "compacted":
					long.Bucket, long.Age = 60_000, 1_000_000
					wins, in = []core.Window{short, long}, 1
				case "compacted first":
					long.Bucket, long.Age = 60_000, 1_000_000
					wins = []core.Window{long}
				}
				s := NewStore(c, wins, in, nil, "self")
				now := serverNow(t, c)
				held := core.Entry{Member: "held", Score: now - 5_000_000} // older than long.Age
				if err := c.ZAdd(ctx, long.Key, redis.Z{Score: float64(held.Score), Member: held.Member}).Err(); err != nil {
					t.Fatal(err)
				}
				gone := core.Entry{Member: "gone", Score: now - 5}
				check := func(probes [2]core.Entry, want [2]bool) {
					t.Helper()
					a := &core.Attempt{Lims: make([]int, len(wins))}
					for i, x := range wins {
						a.Lims[i] = x.Limit
					}
					a.Loss.Probes = probes
					r, err := s.Reserve(ctx, a)
					if err != nil {
						t.Fatal(err)
					}
					if r.Gone != want {
						t.Errorf("probes %s, %s: gone %v, want %v", probes[0].Member, probes[1].Member, r.Gone, want)
					}
				}
				for _, tc := range []struct {
					probes [2]core.Entry
					want   [2]bool
				}{
					{[2]core.Entry{held}, [2]bool{false, false}},
					{[2]core.Entry{gone}, [2]bool{true, false}},
					{[2]core.Entry{held, gone}, [2]bool{false, true}},
					{[2]core.Entry{gone, held}, [2]bool{true, false}},
				} {
					check(tc.probes, tc.want)
				}
				if long.Bucket == 0 {
					return
				}
				// Moved into its bucket, a probe is no member, and not gone.
				if err := CompactScript.Run(ctx, c, []string{long.Key, CompactKey(long.Key)}, long.Bucket, long.Age, long.W+2_000_000, 120_000, BucketMember, CompactBatch, RebuildFrom, 0, StampMember, DenseBucket).Err(); err != nil {
					t.Fatal(err)
				}
				if err := c.ZScore(ctx, long.Key, held.Member).Err(); err != redis.Nil {
					t.Fatalf("held is still a member after the compaction (%v)", err)
				}
				young := core.Entry{Member: "young", Score: now + 60_000_000} // after any cut
				check([2]core.Entry{held}, [2]bool{false, false})
				// Told from the copy taken then, behind its cut, with no
				// second round trip (which would take a copy again).
				cp := s.keys[in].buckets.copy.Load()
				check([2]core.Entry{held}, [2]bool{false, false})
				if cp == nil || s.keys[in].buckets.copy.Load() != cp {
					t.Fatalf("a probe behind the copy's cut read again with CountScript (copy %p, then %p)", cp, s.keys[in].buckets.copy.Load())
				}
				check([2]core.Entry{held, young}, [2]bool{false, true})
				check([2]core.Entry{young, held}, [2]bool{true, false})
				// Behind the cut in a bucket that holds no call (its call
				// lost, say, by a failover to a copy behind that another
				// process compacted since), a probe is gone, as CountScript
				// tells it.
				lost := core.Entry{Member: "lost", Score: held.Score + 2*long.Bucket}
				r, err := CountScript.Run(ctx, c, []string{long.Key, CompactKey(long.Key)}, 0, 0, 2, held.Member, held.Score, lost.Member, lost.Score).Slice()
				if err != nil || len(r) != 2 || r[0] != int64(1) || r[1] != int64(0) {
					t.Fatalf("CountScript told the probes held, lost: %v (%v), want [1 0]", r, err)
				}
			})
		}
	})
}
