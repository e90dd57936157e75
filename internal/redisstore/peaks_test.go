package redisstore

import (
	"context"
	"fmt"
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

// An exact attempt's counts and peaks, read by PeakScript, are what
// core.Peak and a count find in the set, at scores as large as server microseconds (where
// a float printed by Lua would lose digits), on miniredis and on
// redis-server.
func TestPeakScriptMatchesBruteForce(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		checkPeaks(t, c, redistest.Key(t, "peaks"), false)
	})
}

// The same, read by TenantPeakScript in a round that also reads capped
// tenants' members (under one limit, while a tenant is capped), with the
// members each capped tenant has after its From.
func TestTenantPeakScriptMatchesBruteForce(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		checkPeaks(t, c, redistest.Key(t, "tpeaks"), true)
	})
}

// checkPeaks draws members and attempts, and checks the counts and peaks
// each attempt reads, and with tenants (members marked as one of two
// tenants' or none's, both capped) each capped tenant's members too.
func checkPeaks(t *testing.T, c *redis.Client, key string, tenants bool) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	const base = int64(1_764_000_000_000_000) // late 2025, in µs
	peaked, skipped := 0, 0
	for iter := range 200 {
		if err := c.Del(ctx, key, key+":2").Err(); err != nil {
			t.Fatal(err)
		}
		w := int64(5 + rng.IntN(30))
		marks := []string{"", TenantSuffix("a", 1), TenantSuffix("b", 2)}
		byTag := map[string][]int64{} // each capped tenant's scores
		mark := func(name string, s int64) string {
			if !tenants {
				return name
			}
			m := marks[rng.IntN(len(marks))]
			if m != "" {
				byTag[TenantTag(m)] = append(byTag[TenantTag(m)], s)
			}
			return name + m
		}
		var others []int64 // ascending, once sorted
		for i := range rng.IntN(25) {
			s := base + int64(rng.IntN(120))
			others = append(others, s)
			if err := c.ZAdd(ctx, key, redis.Z{Score: float64(s), Member: mark(fmt.Sprint("o", i), s)}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(others)
		limit := 1 + rng.IntN(10)
		a := &core.Attempt{Exact: true, Lims: []int{limit}}
		for i := range 1 + rng.IntN(4) {
			g := base + int64(rng.IntN(120))
			a.Adds = append(a.Adds, core.Entry{Score: g, Member: mark(fmt.Sprint("ours", i), g)})
			if !slices.Contains(a.Checks, g) {
				a.Checks = append(a.Checks, g)
			}
		}
		slices.Sort(a.Checks)
		win := core.Window{Key: key, Limit: limit, Interval: time.Duration(w) * time.Microsecond, W: w}
		wins := []core.Window{win}
		if tenants {
			// Under one limit, a round reads the peaks while a tenant is
			// capped.
			a.Tenants.Peaks = true
			for _, m := range marks[1:] {
				a.Tenants.Caps = append(a.Tenants.Caps, core.TenantCap{Tag: TenantTag(m), Cap: 1, From: base + int64(rng.IntN(120)) - w})
			}
			// Half the rounds scan too, from before the caps' reads or
			// after (see checkScan).
			if rng.IntN(2) == 0 {
				a.Tenants.Scan, a.Tenants.From, a.Tenants.W = true, base+int64(rng.IntN(120)), w
			}
		} else {
			// Two limits: only then does an exact attempt read the peaks
			// without tenants. The second, on a key of its own, is not
			// looked at.
			other := core.Window{Key: key + ":2", Limit: 1000, Interval: time.Second, W: time.Second.Microseconds()}
			a.Lims = append(a.Lims, other.Limit)
			wins = append(wins, other)
		}
		s := NewStore(c, wins, 0, nil, "self")
		r, err := s.Reserve(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if a.Tenants.Scan {
			checkScan(t, c, key, a.Tenants, r)
		}
		for i, cp := range a.Tenants.Caps {
			var want []int64
			for _, s := range byTag[cp.Tag] {
				if s > cp.From {
					want = append(want, s)
				}
			}
			slices.Sort(want)
			if got := r.Caps[i].Members.All(); !slices.Equal(got, want) {
				t.Fatalf("iter %d: tenant %d's scores after %d read %v, want %v", iter, i, cp.From, got, want)
			}
		}
		for i, g := range a.Checks {
			var count int64
			for _, e := range a.Adds {
				if e.Score > g-w && e.Score < g+w {
					count++
				}
			}
			for _, o := range others {
				if o > g-w && o < g+w {
					count++
				}
			}
			after := false // another member in (g, g+w)
			for _, o := range others {
				after = after || (o > g && o < g+w)
			}
			want := core.Peak(others, g, w)
			if count <= int64(limit) || !after {
				want = -1 // the count decides
			}
			if want >= 0 {
				peaked++
			} else {
				skipped++
			}
			if r.Peaks[0][i] != want || r.Counts[0][i] != count {
				t.Fatalf("iter %d: w %d, limit %d, others %v, ours %v: at %d read count %d, peak %d; want %d, %d",
					iter, w, limit, others, a.Adds, g, r.Counts[0][i], r.Peaks[0][i], count, want)
			}
		}
	}
	if peaked == 0 || skipped == 0 {
		t.Fatalf("%d scores had their peak read and %d not: the draw must reach both", peaked, skipped)
	}
}

// On a compacted window too, an exact attempt under several limits reads
// each score's peak (seed 21200): CountScript's, counting a member at its
// score and a compacted call in every window its bucket overlaps, is what
// the most such calls, not the attempt's own, in one window holding the
// score come to, by brute force over every window end; -1 where the count
// decides as well (within the limit, or nothing but the attempt's own
// after the score). Before, a compacted window read no peaks, and a claim
// every window had room for was refused for calls on both sides of it that
// no window holds together.
func TestCompactedPeaksMatchBruteForce(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, mr *miniredis.Miniredis) {
		ctx := context.Background()
		key := redistest.Key(t, "cpeaks")
		rng := rand.New(rand.NewPCG(9, 10))
		// miniredis's clock is set; a real server's runs on: there, times
		// fifty times as long keep the calls ahead of its clock.
		scale := int64(1)
		if mr == nil {
			scale = 50
		}
		peaked, skipped, behind := 0, 0, 0
		for iter := range 150 {
			if err := c.Del(ctx, key, CompactKey(key), key+":2").Err(); err != nil {
				t.Fatal(err)
			}
			now := serverNow(t, c)
			if mr != nil {
				mr.SetTime(time.UnixMicro(now))
			}
			// The calls lie ahead of the clock: the age (a day) moves
			// none, only the bound on the newest does.
			base := now + 100*scale
			w := scale * int64(20+rng.IntN(60))
			b := scale * int64(3+rng.IntN(15))
			calls := map[string]int64{}
			var zs []redis.Z
			for i := range 5 + rng.IntN(40) {
				m := fmt.Sprint("o", i)
				calls[m] = base + scale*int64(rng.IntN(200))
				zs = append(zs, redis.Z{Score: float64(calls[m]), Member: m})
			}
			if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
				t.Fatal(err)
			}
			newest := rng.IntN(len(zs) + 1) // all but these move into their buckets
			day := (24 * time.Hour).Microseconds()
			if err := CompactScript.Run(ctx, c, []string{key, CompactKey(key)}, b, day, 1000*scale, 60000, BucketMember, CompactBatch, RebuildFrom, newest, StampMember, DenseBucket).Err(); err != nil {
				t.Fatal(err)
			}
			h, err := c.HMGet(ctx, CompactKey(key), "lo", "hi").Result()
			if err != nil {
				t.Fatal(err)
			}
			var lo, hi int64 = 1, 0
			if h[0] != nil {
				lo, _ = strconv.ParseInt(h[0].(string), 10, 64)
				hi, _ = strconv.ParseInt(h[1].(string), 10, 64)
			}
			var loose, moved []int64 // members' scores, and the buckets of the calls moved (each call once)
			for m, s := range calls {
				switch n, err := c.ZScore(ctx, key, m).Result(); {
				case err == nil && int64(n) == s:
					loose = append(loose, s)
				case err == redis.Nil && s/b >= lo && s/b <= hi:
					moved = append(moved, s/b)
				default:
					t.Fatalf("iter %d: call %s at %d: %v, buckets %d..%d", iter, m, s, err, lo, hi)
				}
			}
			limit := 1 + rng.IntN(12)
			a := &core.Attempt{Exact: true, Lims: []int{limit, 1000}, Learn: core.Learning{Slots: 1}}
			for i := range 1 + rng.IntN(4) {
				g := base + scale*int64(rng.IntN(220))
				a.Adds = append(a.Adds, core.Entry{Score: g, Member: fmt.Sprint("ours", i)})
				if !slices.Contains(a.Checks, g) {
					a.Checks = append(a.Checks, g)
				}
			}
			slices.Sort(a.Checks)
			// Read compacted (Bucket), never compacted by the round trip
			// itself (no trim, no Keep). The second limit, on a key of its
			// own, is not looked at.
			win := core.Window{Key: key, Limit: limit, Interval: time.Duration(w) * time.Microsecond, W: w, Bucket: b, Age: day}
			other := core.Window{Key: key + ":2", Limit: 1000, Interval: time.Second, W: time.Second.Microseconds()}
			s := NewStore(c, []core.Window{win, other}, 0, nil, "self")
			r, err := s.Reserve(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			// The calls not the attempt's own in (x, y], as CountScript
			// counts them: members at their scores, moved calls in every
			// window their bucket overlaps.
			in := func(x, y int64) (n int64) {
				for _, s := range loose {
					if s > x && s <= y {
						n++
					}
				}
				for _, k := range moved {
					if k*b <= y && (k+1)*b-1 > x {
						n++
					}
				}
				return n
			}
			for i, g := range a.Checks {
				var ours int64
				for _, e := range a.Adds {
					if e.Score > g-w && e.Score < g+w {
						ours++
					}
				}
				count := in(g-w, g+w-1) + ours
				after := false // a call not ours that a window holding g may hold and the one ending at g not
				for _, s := range loose {
					after = after || (s > g && s < g+w)
				}
				for _, k := range moved {
					after = after || (k*b > g && k*b < g+w)
				}
				bucketAfter := false // a moved call's bucket starts after g
				for _, k := range moved {
					bucketAfter = bucketAfter || (k*b > g && k*b < g+w)
				}
				want := int64(-1) // the count decides
				if count > int64(limit) && after {
					if bucketAfter {
						behind++
					}
					for end := g; end < g+w; end++ {
						want = max(want, in(end-w, end))
					}
					peaked++
				} else {
					skipped++
				}
				if r.Counts[0][i] != count || r.Peaks == nil || r.Peaks[0][i] != want {
					var peaks []int64
					if r.Peaks != nil {
						peaks = r.Peaks[0]
					}
					t.Fatalf("iter %d: w %d, bucket %d (%d..%d), limit %d, members %v, moved calls' buckets %v, ours %v: at %d read count %d, peaks %v; want %d, %d",
						iter, w, b, lo, hi, limit, loose, moved, a.Adds, g, r.Counts[0][i], peaks, count, want)
				}
			}
		}
		if peaked == 0 || skipped == 0 || behind == 0 {
			t.Fatalf("%d scores had their peak read (%d with a compacted call after them) and %d not: the draw must reach all three", peaked, behind, skipped)
		}
	})
}
