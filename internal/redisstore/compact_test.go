package redisstore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
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
// buckets, however the calls were moved: in several runs, by age or all but
// the newest few, with calls arriving late into buckets already compacted,
// debt among them, and buckets dropped as they leave the window.
func TestCompactCountsWholeBuckets(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, mr *miniredis.Miniredis) {
		ctx := context.Background()
		key := redistest.Key(t, "compact")
		rng := rand.New(rand.NewPCG(3, 4))
		// miniredis's clock is set; a real server's runs on, and on a
		// loaded machine milliseconds pass between two commands: there,
		// windows fifty times as long keep the calls of a run in them.
		scale := int64(1)
		if mr == nil {
			scale = 50
		}
		for iter := range 30 {
			if err := c.Del(ctx, key, CompactKey(key)).Err(); err != nil {
				t.Fatal(err)
			}
			w := scale * int64(2000+rng.IntN(3000)) // µs
			x := core.Window{Key: key, W: w, Bucket: scale * int64(50+rng.IntN(400))}
			x.Age = scale * (1 + int64(rng.IntN(1000))) // often inside the newest bucket
			keep := w + scale*int64(rng.IntN(2000))
			newest := []int{0, 0, 1, 5, 30}[iter%5] // all but these move too, whatever their age
			// Calls counted a bucket at a time (ZCOUNT) whenever there are
			// any, when they are at least one a bucket, or as in production.
			dense := []int{0, 1, DenseBucket}[iter%3]
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
				// All but the newest move: none left below the score of
				// the one after them.
				floor := math.Inf(-1)
				if newest > 0 {
					zs, err := c.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: "(0", Max: "+inf", Count: 1, Offset: int64(newest)}).Result()
					if err != nil {
						t.Fatal(err)
					}
					if len(zs) > 0 {
						floor = zs[0].Score
					}
				}
				if err := CompactScript.Run(ctx, c, []string{key, CompactKey(key)}, x.Bucket, x.Age, keep, 60000, BucketMember, CompactBatch, RebuildFrom, newest, StampMember, dense).Err(); err != nil {
					t.Fatal(err)
				}
				if below, err := c.ZCount(ctx, key, "(0", "("+strconv.FormatFloat(floor, 'f', 0, 64)).Result(); err != nil || (newest > 0 && below > 0) {
					t.Fatalf("iter %d run %d: %d members (%v) left below %v, the newest but %d", iter, run, below, err, floor, newest)
				}
				// The newest calls stay, unless the age moved them.
				after := now
				if mr == nil {
					after = serverNow(t, c)
				}
				var scores []int64
				for _, s := range calls {
					scores = append(scores, s)
				}
				slices.Sort(scores)
				for _, s := range scores[max(0, len(scores)-newest):] {
					left, err := c.ZCount(ctx, key, strconv.FormatInt(s, 10), strconv.FormatInt(s, 10)).Result()
					if err != nil {
						t.Fatal(err)
					}
					if left == 0 && s >= after-x.Age {
						t.Fatalf("iter %d run %d: a call at %d, among the newest %d and younger than the age, was moved", iter, run, s, newest)
					}
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
// calls (every call added, by member) should give, by brute force.
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
	b, lo, hi, cut := num("b"), num("lo"), num("hi"), num("cut")
	bucket := func(s int64) int64 { return s / b } // scores are positive
	members, err := c.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: "(0", Max: "+inf"}).Result()
	if err != nil {
		t.Fatal(err)
	}
	inSet := map[string]bool{}
	for _, m := range members {
		inSet[m] = true
	}
	// Every call is a member or was moved; a moved one was scored before
	// the cut (in a bucket up to hi), one still a member from the cut on.
	var loose, moved []int64
	for m, s := range calls {
		k := bucket(s)
		switch {
		case inSet[m]:
			if s < cut {
				t.Fatalf("%s: call %q at %d is still a member, behind the cut (%d)", at, m, s, cut)
			}
			loose = append(loose, s)
		case s >= cut || k > hi:
			t.Fatalf("%s: call %q at %d (bucket %d) is gone, after the cut (%d) or the buckets' end (%d)", at, m, s, k, cut, hi)
		case k >= lo:
			moved = append(moved, s)
		}
	}
	// The hash holds its header and the buckets' totals, nothing else (no
	// count of debt: Usage reads debt from the members only).
	for f := range h {
		if _, err := strconv.ParseInt(f, 10, 64); err != nil && !slices.Contains([]string{"b", "lo", "hi", "n", "base", "cut"}, f) {
			t.Fatalf("%s: the buckets hold a field %q", at, f)
		}
	}
	// Counts.
	var ranges []countRange
	oldest := slices.Min(slices.Collect(maps.Values(calls))) // every call: all may have left the buckets
	for range 40 {
		x := oldest - 1000 + int64(rng.IntN(8000))
		ranges = append(ranges, countRange{x, x + 1 + int64(rng.IntN(4000))})
	}
	// Tails: every rank, and beyond; a tail far past the calls (a limit
	// of millions far from full) is empty, at the oldest call's rank not.
	all := len(loose) + len(moved)
	spans := []tailSpan{{oldest: all + 2, newest: 0}, {oldest: len(loose), newest: max(0, len(loose)-1)},
		{oldest: all + 5, newest: all}, {oldest: 1 << 30, newest: 1<<30 - 64}, {oldest: all + 1_000_000, newest: max(0, all-1)}}
	cmd := CountScript.Eval(ctx, c, []string{key, CompactKey(key)}, countArgs(ranges, spans, nil, peakAsk{})...)
	read, err := readCount(cmd, len(ranges), 0, false, len(spans))
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
	// The same counts from a copy of part of the hash (see buckets.go),
	// taken for each range, and one taken for another width.
	for i, r := range ranges {
		from := copyFrom([]countRange{r}, b)
		var vals []any
		for _, f := range copyFields(b, from) {
			if v, ok := h[f]; ok {
				vals = append(vals, v)
			} else {
				vals = append(vals, nil)
			}
		}
		cp, ok := newBucketCopy([2]float64{-1, -1}, b, from, vals)
		if !ok || cp.b != b || cp.cut != cut {
			t.Fatalf("%s: a copy of the buckets: ok %v, %+v; want ok, width %d, cut %d", at, ok, cp, b, cut)
		}
		members, err := c.ZCount(ctx, key, exclusive(r.x), exclusive(r.y)).Result()
		if err != nil {
			t.Fatal(err)
		}
		n, ok := cp.count(r.x, r.y)
		if _, k1 := bucketSpan(r.x, r.y, b); !ok && (k1 >= hi || k1 < from+CopySpan) {
			t.Fatalf("%s: a copy from bucket %d cannot count (%d, %d)", at, from, r.x, r.y)
		}
		if got := members + n; ok && got != read.counts[i] {
			t.Fatalf("%s: count in (%d, %d) from a copy = %d, CountScript's %d", at, r.x, r.y, got, read.counts[i])
		}
		// Fields named from another width: only the header is taken,
		// which tells what needs no bucket's total, and that truly.
		other, taken := newBucketCopy([2]float64{-1, -1}, b+1, from, vals)
		if n2, told := other.count(r.x, r.y); !taken || len(other.cum) > 0 || told && ok && n2 != n {
			t.Fatalf("%s: a copy named from width %d of a hash of width %d: taken %v, %d totals, counted %d (told %v) in (%d, %d), want %d", at, b+1, b, taken, len(other.cum), n2, told, r.x, r.y, n)
		}
	}

	// The ranks, newest first: the members at their scores and the moved
	// calls at their buckets' last microsecond, together.
	ranked := slices.Clone(loose)
	for _, s := range moved {
		ranked = append(ranked, (bucket(s)+1)*b-1)
	}
	slices.Sort(ranked)
	slices.Reverse(ranked)
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

// A long log behind the cut is moved 20,000 calls a run, oldest first,
// and a run whose 20,000 calls share one score moves every call there:
// each run leaves the counts true and the next one goes on.
func TestCompactMovesLongLogsInRuns(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, mr *miniredis.Miniredis) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(5, 6))
		for _, same := range []bool{false, true} {
			key := redistest.Key(t, fmt.Sprintf("long-%v", same))
			now := serverNow(t, c)
			x := core.Window{Key: key, W: 10_000_000, Bucket: 10_000, Age: 1_000}
			calls := map[string]int64{}
			var zs []redis.Z
			for i := range 25_000 {
				s := now - 5_000_000 + int64(i)*100
				if same && i < 20_001 {
					s = now - 5_000_000
				}
				m := fmt.Sprintf("c%d", i)
				calls[m] = s
				zs = append(zs, redis.Z{Score: float64(s), Member: m})
			}
			if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
				t.Fatal(err)
			}
			var moved []int64
			for range 3 {
				v, err := CompactScript.Run(ctx, c, []string{key, CompactKey(key)}, x.Bucket, x.Age, x.W, 60000, BucketMember, CompactBatch, RebuildFrom, 0, StampMember, DenseBucket).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				// Only the first run stops at the batch.
				if stopped := len(moved) == 0; (v[1] == 1) != stopped {
					t.Fatalf("run %d answered %v (moved, stopped at the batch); stopped should be %v", len(moved)+1, v, stopped)
				}
				moved = append(moved, v[0])
				checkCompacted(t, c, key, calls, rng, fmt.Sprintf("same %v, after %v", same, moved))
			}
			want := []int64{19_999, 5_001, 0}
			if same {
				want = []int64{20_001, 4_999, 0}
			}
			if !slices.Equal(moved, want) {
				t.Fatalf("same score %v: runs moved %v calls, want %v", same, moved, want)
			}
		}
	})
}

// A window whose compaction moved a whole batch compacts again with the
// next round trip, trimming or not, until the backlog is gone; then only
// with trims.
func TestCompactCatchesUpWithoutTrims(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		ctx := context.Background()
		key := redistest.Key(t, "catch-up")
		now := serverNow(t, c)
		x := core.Window{Key: key, Limit: 100_000, Interval: 10 * time.Second, W: 10_000_000, Bucket: 10_000, Age: 1_000}
		var zs []redis.Z
		for i := range 45_000 {
			zs = append(zs, redis.Z{Score: float64(now - 5_000_000 + int64(i)*100), Member: fmt.Sprint("c", i)})
		}
		if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
			t.Fatal(err)
		}
		s := NewStore(c, []core.Window{x}, 0, nil, "self")
		var left []int64
		for i := range 5 {
			a := &core.Attempt{Lims: []int{x.Limit}}
			if i == 0 {
				a.Trim = core.Trim{On: true}
			}
			if _, err := s.Reserve(ctx, a); err != nil {
				t.Fatal(err)
			}
			n, err := c.ZCount(ctx, key, "(0", "+inf").Result()
			if err != nil {
				t.Fatal(err)
			}
			left = append(left, n)
		}
		// A run moves the calls scored before the batch's last one.
		if want := []int64{25_001, 5_002, 0, 0, 0}; !slices.Equal(left, want) {
			t.Fatalf("calls left as members after each round trip: %v, want %v", left, want)
		}
		n, err := c.HGet(ctx, CompactKey(key), "n").Int64()
		if err != nil || n != 45_000 {
			t.Fatalf("buckets hold %d calls (%v), want 45000", n, err)
		}
	})
}

// A compaction that leaves at most a quarter of a set writes it anew, so
// a set a burst grew takes a small set's memory and encoding again (on
// redis-server; without the rewrite it stays a skiplist, and on 7.0 keeps
// the burst's hashtable), and
// keeps every member left at its score and its TTL. A set the compaction
// empties keeps its TTL too.
func TestCompactRebuildsShrunkSets(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, mr *miniredis.Miniredis) {
		ctx := context.Background()
		for _, rebuild := range []int64{RebuildFrom, 1 << 62} {
			for _, young := range []int{20, 0} {
				key := redistest.Key(t, fmt.Sprintf("rebuild-%d-%d", rebuild, young))
				now := serverNow(t, c)
				x := core.Window{Key: key, W: 10_000_000, Bucket: 10_000, Age: 1_000}
				var zs []redis.Z
				for i := range 10_000 {
					zs = append(zs, redis.Z{Score: float64(now - 5_000_000 + int64(i)*100), Member: fmt.Sprint("old", i)})
				}
				left := map[string]float64{PauseMember: float64(MetaScore(now + 9_000_000))}
				for i := range young {
					left[fmt.Sprint("young", i)] = float64(now + 1_000_000 + int64(i))
				}
				for m, s := range left {
					zs = append(zs, redis.Z{Score: s, Member: m})
				}
				if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
					t.Fatal(err)
				}
				if err := c.PExpire(ctx, key, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				v, err := CompactScript.Run(ctx, c, []string{key, CompactKey(key)}, x.Bucket, x.Age, x.W, 60000, BucketMember, CompactBatch, rebuild, 0, StampMember, DenseBucket).Int64Slice()
				if err != nil || v[0] != 10_000 {
					t.Fatalf("the run answered %v, %v; want 10000 calls moved", v, err)
				}
				got, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, z := range got {
					m := z.Member.(string)
					if m == BucketMember || m == StampMember {
						continue
					}
					if s, ok := left[m]; !ok || s != z.Score {
						t.Fatalf("rebuild %d, young %d: %q at %v after the run; want only the members left, at their scores", rebuild, young, m, z.Score)
					}
					delete(left, m)
				}
				if len(left) > 0 {
					t.Fatalf("rebuild %d, young %d: %d members lost: %v", rebuild, young, len(left), left)
				}
				if ttl, err := c.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
					t.Fatalf("rebuild %d, young %d: TTL %v after the run (%v), want the minute it had", rebuild, young, ttl, err)
				}
				if mr != nil {
					continue // miniredis has no encodings
				}
				enc, err := c.ObjectEncoding(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				size, err := c.MemoryUsage(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				// Without the rewrite the set stays a skiplist; how much of
				// its hashtable is left depends on the server's version (some
				// shrink a dict as members go), so only the rewrite's size is
				// checked.
				small := enc == "listpack" || enc == "ziplist"
				if rebuilt := rebuild == RebuildFrom; small != rebuilt || (rebuilt && size >= 8192) {
					t.Fatalf("rebuild from %d: a set of %d members left is %s, %d B", rebuild, young+2, enc, size)
				}
			}
		}
	})
}
