package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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
		checkPeaks(t, c, redistest.Key(t, "peaks"))
	})
}

func checkPeaks(t *testing.T, c *redis.Client, key string) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	const base = int64(1_764_000_000_000_000) // late 2025, in µs
	peaked, skipped := 0, 0
	for iter := range 200 {
		if err := c.Del(ctx, key, key+":2").Err(); err != nil {
			t.Fatal(err)
		}
		w := int64(5 + rng.IntN(30))
		var others []int64 // ascending, once sorted
		for i := range rng.IntN(25) {
			s := base + int64(rng.IntN(120))
			others = append(others, s)
			if err := c.ZAdd(ctx, key, redis.Z{Score: float64(s), Member: fmt.Sprint("o", i)}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(others)
		limit := 1 + rng.IntN(10)
		a := &core.Attempt{Exact: true, Lims: []int{limit}}
		for i := range 1 + rng.IntN(4) {
			g := base + int64(rng.IntN(120))
			a.Adds = append(a.Adds, core.Entry{Score: g, Member: fmt.Sprint("ours", i)})
			if !slices.Contains(a.Checks, g) {
				a.Checks = append(a.Checks, g)
			}
		}
		slices.Sort(a.Checks)
		// Two limits: only then does an exact attempt read the peaks. The
		// second, on a key of its own, is not looked at.
		win := core.Window{Key: key, Limit: limit, Interval: time.Duration(w) * time.Microsecond, W: w}
		other := core.Window{Key: key + ":2", Limit: 1000, Interval: time.Second, W: time.Second.Microseconds()}
		a.Lims = append(a.Lims, other.Limit)
		s := NewStore(c, []core.Window{win, other}, 0, nil, "self")
		r, err := s.Reserve(ctx, a)
		if err != nil {
			t.Fatal(err)
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
