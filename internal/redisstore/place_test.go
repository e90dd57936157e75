package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// PlaceScript puts each claim where a reference placement over the same
// set puts it (the earliest score from its floor at which the member
// ranked cap-pos-n from the top, garbage aside, lies w behind, in every
// window), leaves it out past its last score and stops at its reach;
// its counts are exact, the first claim it places fits when nobody else
// writes, and a claim sent again keeps its score: on random sets and
// claims, one or two windows, on miniredis and on redis-server.
func TestPlaceScriptPlacesWhereClaimsFit(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		checkPlacement(t, c, redistest.Key(t, "place"))
	})
}

func checkPlacement(t *testing.T, c *redis.Client, key string) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	const base = int64(1_764_000_000_000_000) // late 2025, in µs
	placedSome, leftSome, stopped := 0, 0, 0
	for iter := range 300 {
		nw := 1 + rng.IntN(2)
		wins := make([]core.Window, nw)
		sets := make([][]int64, nw) // each window's scores, ascending
		for wi := range wins {
			k := fmt.Sprint(key, ":", wi)
			if wi > 0 {
				k = "{" + HashTag(key) + "}" + k
			}
			limit := 1 + rng.IntN(12)
			w := int64(20 + rng.IntN(40))
			wins[wi] = core.Window{Key: k, Limit: limit, Interval: time.Duration(w) * time.Microsecond, W: w}
			if err := c.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
			for i := range rng.IntN(2 * limit) {
				s := base + int64(rng.IntN(150))
				if rng.IntN(20) == 0 {
					s = base + 2*core.FutureBound // garbage
				}
				sets[wi] = append(sets[wi], s)
				if err := c.ZAdd(ctx, k, redis.Z{Score: float64(s), Member: fmt.Sprint("o", i)}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			slices.Sort(sets[wi])
		}
		rules := &core.Rules{Wins: wins, MinLimit: 1, MaxBatch: 64, Ahead: time.Second, Shares: [core.Levels]int{600, 1000, 1000}}
		a := &core.Attempt{Exact: true, Planned: core.Planned{Soonest: base}, Riders: core.Riders{Placement: core.Placement{Place: true}}}
		for _, x := range wins {
			a.Lims = append(a.Lims, x.Limit)
		}
		for _, lim := range a.Lims {
			caps := rules.Caps(lim)
			for l := range a.Caps {
				a.Caps[l] = append(a.Caps[l], caps[l])
			}
		}
		for ci := range 1 + rng.IntN(4) {
			cl := core.Claim{N: 1 + rng.IntN(3), First: len(a.Adds), Prio: core.Level(rng.IntN(core.Levels))}
			cl.Floor = base + int64(rng.IntN(150))
			cl.Reach = cl.Floor + int64(rng.IntN(150))
			cl.Last = cl.Floor + int64(rng.IntN(int(cl.Reach-cl.Floor)+1))
			if rng.IntN(4) == 0 {
				cl.Last, cl.Reach = cl.Floor, math.MaxInt64 // now or never
			}
			cl.Score = cl.Floor
			for j := range cl.N {
				a.Adds = append(a.Adds, core.Entry{Score: cl.Score, Member: fmt.Sprint("ours", ci, "-", j)})
			}
			a.Claims = append(a.Claims, cl)
		}
		want := referencePlacement(a, wins, sets, base+core.FutureBound)
		s := NewStore(c, wins, 0, nil, "self")
		r, err := s.Reserve(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.Placed, want) {
			t.Fatalf("iter %d: placed %v, want %v; claims %+v, sets %v", iter, r.Placed, want, a.Claims, sets)
		}
		for i, g := range want {
			switch {
			case g > 0:
				placedSome++
			case a.Claims[i].Floor <= a.Claims[i].Last:
				leftSome++
			}
			if g == 0 && i > 0 && want[i-1] == 0 {
				stopped++
			}
		}
		// The counts are exact over the set as the script left it: the
		// admissions rest on them.
		for wi, x := range wins {
			final := slices.Clone(sets[wi])
			for ci, g := range want {
				for range a.Claims[ci].N {
					if g > 0 {
						final = append(final, g)
					}
				}
			}
			for i, g := range a.Checks {
				var n int64
				for _, s := range final {
					if s > g-x.W && s < g+x.W {
						n++
					}
				}
				if r.Counts[wi][i] != n {
					t.Fatalf("iter %d: window %d counted %d at %d, want %d", iter, wi, r.Counts[wi][i], g, n)
				}
			}
		}
		// With nobody else writing, the first claim placed fits (when
		// none is now or never, whose counts may refuse it), as the
		// first claim at the first free slot a reply told of does: the
		// later ones may still be refused by the counts of the earlier
		// ones' scores (see core's admit), as they may be at the slots
		// the client works out.
		claims := slices.Clone(a.Claims)
		core.PlaceClaims(claims, r)
		out := core.Resolve(rules, core.ResolveIn{A: a, R: r, Claims: claims, Leaving: make([]bool, len(claims)), Lims: a.Lims, Arrived: base}, core.ResolveOut{})
		sameLevel := true // and none now or never
		for _, cl := range a.Claims {
			sameLevel = sameLevel && cl.Prio == a.Claims[0].Prio && cl.Floor < cl.Last
		}
		for i, g := range want {
			if g <= 0 && out.OK[i] {
				t.Fatalf("iter %d: claim %d was not placed, yet admitted", iter, i)
			}
			if g > 0 {
				if sameLevel && !out.OK[i] {
					t.Fatalf("iter %d: the first claim placed (%d, at %d) was refused with nobody else writing: counts %v", iter, i, g, r.Counts)
				}
				break
			}
		}
		// Sent again after its reply was lost: the placed claims keep
		// their scores, and are counted where they are.
		a.Resent(false)
		again, err := s.Reserve(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range want {
			if g > 0 && again.Placed[i] != g {
				t.Fatalf("iter %d: claim %d placed at %d, then at %d when sent again", iter, i, g, again.Placed[i])
			}
		}
	}
	if placedSome == 0 || leftSome == 0 || stopped == 0 {
		t.Fatalf("placed %d, left out %d, after a stop %d: the draw must reach each", placedSome, leftSome, stopped)
	}
}

// referencePlacement places a's claims over sets (each window's scores,
// ascending) as PlaceScript documents it.
func referencePlacement(a *core.Attempt, wins []core.Window, sets [][]int64, garbage int64) []int64 {
	var out []int64
	stop, pos := false, 0
	for _, cl := range a.Claims {
		if cl.Floor == cl.Last {
			out = append(out, cl.Floor)
			pos += cl.N
			continue
		}
		if stop {
			out = append(out, 0)
			continue
		}
		g := cl.Floor
		for wi, x := range wins {
			r := a.Caps[cl.Prio][wi] - pos - cl.N
			if r < 0 {
				g = -1
				break
			}
			var sane []int64
			for _, s := range sets[wi] {
				if s <= garbage {
					sane = append(sane, s)
				}
			}
			if i := len(sane) - 1 - r; i >= 0 {
				g = max(g, sane[i]+x.W+a.Margin.Widen)
			}
		}
		if g > cl.Reach {
			stop = true
		}
		if g < 0 || g > cl.Last {
			out = append(out, 0)
			continue
		}
		out = append(out, g)
		pos += cl.N
	}
	return out
}

// After its first run, PlaceScript is called by its digest; a server that
// lost it (restarted, failed over, its scripts flushed) makes a round that
// places nothing, without an error, and the next round sends its text
// again: on miniredis and on redis-server.
func TestPlaceScriptLostByTheServer(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		ctx := context.Background()
		key, s := oneWindow(t, c, "lost", 5)
		const base = int64(1_764_000_000_000_000)
		round := func(i int) core.Reply {
			t.Helper()
			r, err := s.Reserve(ctx, placeOne(base, 5, fmt.Sprint("m", i)))
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			return r
		}
		if r := round(0); len(r.Placed) != 1 || r.Placed[0] != base {
			t.Fatalf("first round placed %v, want at %d", r.Placed, base)
		}
		if r := round(1); len(r.Placed) != 1 || r.Placed[0] != base {
			t.Fatalf("second round (by digest) placed %v, want at %d", r.Placed, base)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if r := round(2); len(r.Placed) != 1 || r.Placed[0] != 0 {
			t.Fatalf("a round after the server lost the script placed %v, want nothing", r.Placed)
		}
		if n := c.ZScore(ctx, key, "m2").Err(); !errors.Is(n, redis.Nil) {
			t.Fatalf("the unplaced claim's member is in the set (%v)", n)
		}
		if r := round(3); len(r.Placed) != 1 || r.Placed[0] != base {
			t.Fatalf("the round after placed %v, want at %d", r.Placed, base)
		}
	})
}

// oneWindow is a Store on one window of limit a second, on a key named
// for name.
func oneWindow(t *testing.T, c *redis.Client, name string, limit int) (string, *Store) {
	key := redistest.Key(t, name)
	win := core.Window{Key: key, Limit: limit, Interval: time.Second, W: time.Second.Microseconds()}
	return key, NewStore(c, []core.Window{win}, 0, nil, "self")
}

// placeOne is an exact attempt under one limit that has the store place
// one claim of one call, member, from base on (within 1ms).
func placeOne(base int64, limit int, member string) *core.Attempt {
	a := &core.Attempt{Exact: true, Planned: core.Planned{Soonest: base}, Lims: []int{limit},
		Riders: core.Riders{Placement: core.Placement{Place: true, Caps: [core.Levels][]int{{limit}, {limit}, {limit}}}}}
	a.Adds = []core.Entry{{Score: base, Member: member}}
	a.Claims = []core.Claim{{Score: base, N: 1, Prio: core.Normal, Floor: base, Last: base + 1000, Reach: base + 1000}}
	return a
}

// failAfterFirst is a go-redis hook that lets one pipeline through
// (a new connection's setup aside), then fails the next fails, as a
// broken connection would.
type failAfterFirst struct {
	through bool
	fails   int
}

func (h *failAfterFirst) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failAfterFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *failAfterFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		switch {
		case len(cmds) > 0 && cmds[0].Name() == "client":
			// a new connection's setup
		case !h.through:
			h.through = true
		case h.fails > 0:
			h.fails--
			return io.ErrUnexpectedEOF
		}
		return next(ctx, cmds)
	}
}

// A round trip whose claims the store placed, which then finds the key
// compacted by another process, counts it again alone, without its
// writes, when the connection breaks; and fails, not to be sent again,
// when it breaks every time: the claims were rewritten to their placed
// scores, and a resend, which does not place on a compacted key, would
// add the claim it did not place where no count looks and admit it
// unchecked (5 in a window of 3).
func TestPlacedRoundNotResentAfterAFailedRecount(t *testing.T) {
	for _, fails := range []int{1, 3} {
		t.Run(fmt.Sprint(fails, "-fails"), func(t *testing.T) {
			onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
				ctx := context.Background()
				key, s := oneWindow(t, c, "placed-recount", 3)
				const base = int64(1_764_000_000_000_000)
				// Another process compacts the key: its flag is set.
				if err := c.ZAdd(ctx, key, redis.Z{Score: float64(MetaScore(1000)), Member: BucketMember}).Err(); err != nil {
					t.Fatal(err)
				}
				hook := &failAfterFirst{fails: fails}
				c.AddHook(hook)
				r, err := s.Reserve(ctx, placeOne(base, 3, "m0"))
				if !hook.through || hook.fails > 0 {
					t.Fatalf("%d of the recount's %d failures left (%v)", hook.fails, fails, err)
				}
				switch {
				case fails < 3 && (err != nil || len(r.Counts[0]) != 1 || r.Counts[0][0] != 1):
					t.Fatalf("Reserve with a recount that broke once: %v, counts %v; want the claim counted", err, r.Counts)
				case fails == 3 && (err == nil || Transient(err)):
					t.Fatalf("Reserve with a recount that broke each time: %v (transient %v), want an error not to send again", err, Transient(err))
				case fails == 3 && !errors.Is(err, io.ErrUnexpectedEOF):
					t.Fatalf("Reserve's error %v does not wrap the broken connection's", err)
				}
			})
		})
	}
}
