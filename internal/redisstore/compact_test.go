package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// onBothServers runs check on miniredis and on redis-server.
func onBothServers(t *testing.T, check func(t *testing.T, c *redis.Client, mr *miniredis.Miniredis)) {
	for _, server := range []string{"miniredis", "redis-server"} {
		t.Run(server, func(t *testing.T) {
			var (
				c  *redis.Client
				mr *miniredis.Miniredis
			)
			if server == "miniredis" {
				mr = miniredis.RunT(t)
				c = redis.NewClient(&redis.Options{Addr: mr.Addr()})
				t.Cleanup(func() { c.Close() })
			} else {
				c = redistest.Start(t).NewClient()
			}
			check(t, c, mr)
		})
	}
}

// A compacted window counts, in any range, exactly its members there plus
// every call of a bucket that overlaps it, and its tails rank members above
// buckets, however the calls were moved: in several runs, with calls
// arriving late into buckets already compacted, debt among them, and
// buckets dropped as they leave the window.
func TestCompactCountsWholeBuckets(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, mr *miniredis.Miniredis) {
		ctx := context.Background()
		key := redistest.Key(t, "compact")
		rng := rand.New(rand.NewPCG(3, 4))
		for iter := range 30 {
			if err := c.Del(ctx, key, CompactKey(key)).Err(); err != nil {
				t.Fatal(err)
			}
			w := int64(2000 + rng.IntN(3000)) // µs
			x := core.Window{Key: key, W: w, Bucket: int64(50 + rng.IntN(400))}
			x.Age = x.Bucket + int64(rng.IntN(1000))
			keep := w + int64(rng.IntN(2000))
			calls := map[string]int64{} // every call added, by member
			now := serverNow(t, c)
			for run := range 4 {
				if mr != nil {
					now += int64(500 + rng.IntN(3000))
					mr.SetTime(time.UnixMicro(now))
				} else {
					now = serverNow(t, c)
				}
				// Calls from two windows back to one ahead, some of them
				// late (behind what an earlier run compacted).
				var zs []redis.Z
				for i := range 20 + rng.IntN(60) {
					s := now - 2*w + int64(rng.IntN(int(3*w)))
					m := fmt.Sprintf("r%dc%d", run, i)
					if rng.IntN(5) == 0 {
						m = core.DebtPrefix + m
					}
					calls[m] = s
					zs = append(zs, redis.Z{Score: float64(s), Member: m})
				}
				if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
					t.Fatal(err)
				}
				if err := CompactScript.Run(ctx, c, []string{key, CompactKey(key)}, x.Bucket, x.Age, keep, 60000, BucketMember).Err(); err != nil {
					t.Fatal(err)
				}
				checkCompacted(t, c, key, calls, rng, fmt.Sprintf("iter %d run %d", iter, run))
			}
		}
	})
}

// serverNow reads the server's clock, in µs.
func serverNow(t *testing.T, c *redis.Client) int64 {
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMicro()
}

// checkCompacted compares CountScript's counts and tails on key with what
// calls (every call added, by member) should give, by brute force, and
// the buckets' debt with the debt among the calls they hold.
func checkCompacted(t *testing.T, c *redis.Client, key string, calls map[string]int64, rng *rand.Rand, at string) {
	t.Helper()
	ctx := context.Background()
	h, err := c.HGetAll(ctx, CompactKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	num := func(f string) int64 {
		v, err := strconv.ParseInt(h[f], 10, 64)
		if err != nil {
			t.Fatalf("%s: field %q of the buckets: %v", at, f, err)
		}
		return v
	}
	b, lo, hi := num("b"), num("lo"), num("hi")
	bucket := func(s int64) int64 { return s / b } // scores are positive
	members, err := c.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: "(0", Max: "+inf"}).Result()
	if err != nil {
		t.Fatal(err)
	}
	inSet := map[string]bool{}
	for _, m := range members {
		inSet[m] = true
	}
	// Every call is a member or was moved; a moved one lies in a bucket
	// up to hi, and one still a member after hi's end.
	var loose, moved []int64
	debt := map[int64]int64{}
	for m, s := range calls {
		k := bucket(s)
		switch {
		case inSet[m]:
			if k <= hi {
				t.Fatalf("%s: call %q at %d (bucket %d) is still a member, behind the buckets' end (%d)", at, m, s, k, hi)
			}
			loose = append(loose, s)
		case k > hi:
			t.Fatalf("%s: call %q at %d (bucket %d) is gone, after the buckets' end (%d)", at, m, s, k, hi)
		case k >= lo:
			moved = append(moved, s)
			if strings.HasPrefix(m, core.DebtPrefix) {
				debt[k]++
			}
		}
	}
	for k := lo; k <= hi; k++ {
		got, _ := strconv.ParseInt(h["d"+strconv.FormatInt(k, 10)], 10, 64)
		if got != debt[k] {
			t.Fatalf("%s: bucket %d holds %d debt, want %d", at, k, got, debt[k])
		}
	}
	// Counts.
	var ranges []countRange
	for range 40 {
		x := slices.Min(append(loose, moved...)) - 1000 + int64(rng.IntN(8000))
		ranges = append(ranges, countRange{x, x + 1 + int64(rng.IntN(4000))})
	}
	// Tails: every rank, and beyond.
	all := len(loose) + len(moved)
	spans := []tailSpan{{oldest: all + 2, newest: 0}, {oldest: len(loose), newest: max(0, len(loose)-1)}}
	cmd := CountScript.Eval(ctx, c, []string{key, CompactKey(key)}, countArgs(ranges, spans, core.Entry{})...)
	read, err := readCount(cmd, len(ranges), len(spans))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range ranges {
		var want int64
		for _, s := range loose {
			if s > r.x && s < r.y {
				want++
			}
		}
		for _, s := range moved {
			if bucket(s)*b < r.y && (bucket(s)+1)*b-1 > r.x {
				want++
			}
		}
		if read.counts[i] != want {
			t.Fatalf("%s: count in (%d, %d) = %d, want %d (b %d, buckets %d..%d)", at, r.x, r.y, read.counts[i], want, b, lo, hi)
		}
	}
	// The ranks, newest first: the members by score, then the moved calls
	// by bucket, each as its bucket's last microsecond.
	slices.Sort(loose)
	slices.Reverse(loose)
	var ranked []int64
	ranked = append(ranked, loose...)
	slices.Sort(moved)
	slices.Reverse(moved)
	for _, s := range moved {
		ranked = append(ranked, (bucket(s)+1)*b-1)
	}
	for j, span := range spans {
		var want []int64
		for r := span.oldest; r >= span.newest; r-- {
			if r < len(ranked) {
				want = append(want, ranked[r])
			}
		}
		var got []int64
		for _, e := range read.tails[j] {
			got = append(got, e.Score)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: tail of ranks %d..%d = %v, want %v", at, span.oldest, span.newest, got, want)
		}
	}
}
