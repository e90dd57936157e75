package core

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// FuzzPlan: whatever the queue and what the last reply told, a plan keeps
// its promises to the worker: one decision per request; the claims are
// the Take decisions, in queue order, at no score before the round's
// soonest or a shared pause's end; the checks are their distinct scores;
// no claim is past its deadline; a request beyond the first limit fails
// as too many; a held round claims nothing; and a batch holds no more
// than BatchUnits, save a first claim larger than that.
func FuzzPlan(f *testing.F) {
	f.Add(uint64(1), uint8(8), uint8(6), false, false)
	f.Add(uint64(2), uint8(64), uint8(40), true, false)
	f.Add(uint64(3), uint8(3), uint8(9), true, true)
	f.Fuzz(func(t *testing.T, seed uint64, limit8, queue8 uint8, near, paused bool) {
		rng := rand.New(rand.NewPCG(seed, seed^0x51ed))
		limit := 1 + int(limit8%100)
		c := testConfig(limit, time.Second, time.Duration(rng.IntN(1500))*time.Millisecond)
		c.Shares = [Levels]int{1 + rng.IntN(1000), 1000, 1000}
		lowered := 1 + rng.IntN(limit)
		in := planAt(lowered)
		in.Hold = rng.IntN(8) == 0
		soonest := in.Clock.Server(in.Now) + in.Clock.RTT
		if paused {
			in.PausedTill = soonest + int64(rng.IntN(2_000_000))
		}
		if near {
			in.Known.Near = true
			for range rng.IntN(limit + 1) {
				in.Known.Slots = append(in.Known.Slots, soonest+int64(rng.IntN(3_000_000)))
			}
			slices.Sort(in.Known.Slots)
		}
		reqs := make([]Request, int(queue8%50))
		for i := range reqs {
			reqs[i] = Request{N: 1 + rng.IntN(limit+1), Now: rng.IntN(4) == 0, Prio: Level(rng.IntN(Levels))}
			if !reqs[i].Now && rng.IntN(2) == 0 { // AllowN waits for nothing: no deadline
				reqs[i].Deadline = in.Now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			}
		}
		p := Plan(c, in, reqs, PlanOut{})
		if len(p.Each) != len(reqs) {
			t.Fatalf("%d decisions for %d requests", len(p.Each), len(reqs))
		}
		var claims []Claim
		units := 0
		for i, d := range p.Each {
			r := reqs[i]
			if r.N > lowered && (d.Action != Fail || d.Why != TooMany) {
				t.Fatalf("request %d of %d units under a limit lowered to %d: %+v, want failed as too many", i, r.N, lowered, d)
			}
			if d.Action != Take {
				continue
			}
			if in.Hold {
				t.Fatalf("a held round claimed for request %d: %+v", i, d)
			}
			if d.Score < soonest || d.Score < in.PausedTill {
				t.Fatalf("request %d claimed %d, before soonest %d or the pause's end %d", i, d.Score, soonest, in.PausedTill)
			}
			if !r.Deadline.IsZero() && TooLate(in.Clock.Local(d.Score), r.Deadline) {
				t.Fatalf("request %d claimed %d, past its deadline %s", i, d.Score, r.Deadline)
			}
			claims = append(claims, Claim{Score: d.Score, N: r.N, Prio: r.Prio})
			units += r.N
		}
		if len(claims) != len(p.Claims) {
			t.Fatalf("%d Take decisions, %d claims", len(claims), len(p.Claims))
		}
		for i := range claims {
			if got := p.Claims[i]; got.Score != claims[i].Score || got.N != claims[i].N || got.Prio != claims[i].Prio {
				t.Fatalf("claim %d is %+v, want %+v", i, got, claims[i])
			}
		}
		var want []int64
		for _, cl := range claims {
			want = append(want, cl.Score)
		}
		slices.Sort(want)
		if want = slices.Compact(want); !slices.Equal(want, p.Checks) {
			t.Fatalf("checks %v, want the claims' distinct scores %v", p.Checks, want)
		}
		if len(claims) > 1 && units > c.BatchUnits() {
			t.Fatalf("a batch of %d claims holds %d units, more than %d", len(claims), units, c.BatchUnits())
		}
	})
}
