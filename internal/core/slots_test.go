package core

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// bruteFits reports whether adding n members at g to set keeps every window
// (t-w, t] at or under limit, by checking every window that can matter.
func bruteFits(set []int64, g int64, n, limit int, w int64) bool {
	all := append(append([]int64(nil), set...), make([]int64, n)...)
	for i := range n {
		all[len(set)+i] = g
	}
	return MaxInWindow(all, w) <= limit
}

// keepClaims is set with the members of the claims ok keeps.
func keepClaims(set []int64, claims []Claim, ok []bool) []int64 {
	kept := append([]int64(nil), set...)
	for i, c := range claims {
		if ok[i] {
			for range c.N {
				kept = append(kept, c.Score)
			}
		}
	}
	return kept
}

func TestAdmitMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 3000 {
		limit := 1 + rng.IntN(6)
		w := int64(10 + rng.IntN(40))
		var set []int64
		for range rng.IntN(2 * limit) {
			set = append(set, int64(rng.IntN(200)))
		}
		if MaxInWindow(set, w) > limit {
			continue // admit assumes the set already holds the invariant
		}
		var claims []Claim
		var checks []int64
		for range 1 + rng.IntN(4) {
			c := Claim{Score: int64(rng.IntN(200)), N: 1 + rng.IntN(limit)}
			claims = append(claims, c)
		}
		sort.Slice(claims, func(i, j int) bool { return claims[i].Score < claims[j].Score })
		seen := map[int64]bool{}
		for _, c := range claims {
			if !seen[c.Score] {
				seen[c.Score] = true
				checks = append(checks, c.Score)
			}
		}
		counts := countsAfterInsert(set, claims, checks, w)
		ok := admit(claims, checks, counts, nil, capsOf(limit), w, nil)
		if got := MaxInWindow(keepClaims(set, claims, ok), w); got > limit {
			t.Fatalf("iter %d: set %v, claims %v, limit %d, w %d: kept %v gives a window of %d",
				iter, set, claims, limit, w, ok, got)
		}
		// A lone claim at the tail (where slots are given) is kept exactly
		// when it fits; inside the set admit may refuse a claim that would
		// fit, as it counts all of (g-w, g+w) at once.
		atTail := true
		for _, s := range set {
			atTail = atTail && s <= claims[0].Score
		}
		if len(claims) == 1 && atTail && ok[0] != bruteFits(set, claims[0].Score, claims[0].N, limit, w) {
			t.Fatalf("iter %d: set %v, claim %v, limit %d, w %d: admit says %v, brute force disagrees",
				iter, set, claims[0], limit, w, ok[0])
		}
		// With the peaks an exact attempt reads, the same holds, and a lone
		// claim anywhere is kept exactly when it fits.
		sorted := slices.Sorted(slices.Values(set))
		peaks := make([]int64, len(checks))
		for i, h := range checks {
			peaks[i] = Peak(sorted, h, w)
			if counts[i] <= int64(limit) {
				peaks[i] = -1 // as PeakScript answers: the count decides
			}
		}
		ok = admit(claims, checks, counts, peaks, capsOf(limit), w, nil)
		if got := MaxInWindow(keepClaims(set, claims, ok), w); got > limit {
			t.Fatalf("iter %d: set %v, claims %v, limit %d, w %d: with peaks %v, kept %v gives a window of %d",
				iter, set, claims, limit, w, peaks, ok, got)
		}
		if len(claims) == 1 && ok[0] != bruteFits(set, claims[0].Score, claims[0].N, limit, w) {
			t.Fatalf("iter %d: set %v, claim %v, limit %d, w %d: with peaks %v admit says %v, brute force disagrees",
				iter, set, claims[0], limit, w, peaks, ok[0])
		}
	}
}

// TestNextSlotsMatchesBruteForce: the slot computed for the j-th member
// added at the tail is the earliest tail score at which it fits.
func TestNextSlotsMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 3000 {
		limit := 1 + rng.IntN(6)
		k := 1 + rng.IntN(limit)
		w := int64(10 + rng.IntN(40))
		// A set that holds the invariant, built by admitting at the tail.
		var set []Entry
		var scores []int64
		now := int64(0)
		for range rng.IntN(3 * limit) {
			now += int64(rng.IntN(15))
			if bruteFits(scores, now, 1, limit, w) {
				scores = append(scores, now)
				set = append(set, Entry{Score: now, Member: fmt.Sprint("m", len(set))})
			}
		}
		// Some of it is this process's rejected members, still in the set.
		var dropped []Entry
		var clean []int64
		for _, e := range set {
			if rng.IntN(5) == 0 {
				dropped = append(dropped, e)
			} else {
				clean = append(clean, e.Score)
			}
		}
		sort.Slice(set, func(i, j int) bool { return set[i].Less(set[j]) })
		extra := len(dropped) + rng.IntN(2)
		tail := zrange(set, -(limit + extra), -(limit - k + 1))
		slots := nextSlots(tail, dropped, limit, k, extra, w)
		if len(slots) != k {
			t.Fatalf("iter %d: got %d slots, want %d", iter, len(slots), k)
		}
		last := int64(0)
		for _, s := range clean {
			last = max(last, s)
		}
		for j, s := range slots {
			// Adding j+1 members at the tail at score max(s, last) must fit,
			// and one microsecond earlier must not (unless it is "now").
			at := max(s, last)
			if !bruteFits(clean, at, j+1, limit, w) {
				t.Fatalf("iter %d: slot %d = %d does not fit %d members (set %v, limit %d, w %d)",
					iter, j, s, j+1, clean, limit, w)
			}
			if s > last && bruteFits(clean, s-1, j+1, limit, w) {
				t.Fatalf("iter %d: slot %d = %d is late: %d fits too (set %v, limit %d, w %d)",
					iter, j, s, s-1, clean, limit, w)
			}
		}
	}
}

// zrange mimics ZRANGE key start stop on an ascending set, with Redis's
// clamping of negative indexes.
func zrange(set []Entry, start, stop int) []Entry {
	n := len(set)
	if start < 0 {
		start = max(0, n+start)
	}
	if stop < 0 {
		stop = n + stop
	}
	if stop >= n {
		stop = n - 1
	}
	if start > stop || stop < 0 {
		return nil
	}
	return append([]Entry(nil), set[start:stop+1]...)
}

func FuzzAdmitKeepsInvariant(f *testing.F) {
	f.Add(uint64(1), uint8(3), uint8(20), []byte{1, 5, 9, 30})
	f.Add(uint64(7), uint8(1), uint8(1), []byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, seed uint64, limit8, w8 uint8, raw []byte) {
		limit := 1 + int(limit8%8)
		w := 1 + int64(w8)
		var set []int64
		for _, b := range raw {
			if bruteFits(set, int64(b), 1, limit, w) {
				set = append(set, int64(b))
			}
		}
		rng := rand.New(rand.NewPCG(seed, seed^0x9e37))
		var claims []Claim
		for range 1 + rng.IntN(5) {
			claims = append(claims, Claim{Score: int64(rng.IntN(300)), N: 1 + rng.IntN(limit)})
		}
		sort.Slice(claims, func(i, j int) bool { return claims[i].Score < claims[j].Score })
		var checks []int64
		for _, c := range claims {
			if len(checks) == 0 || checks[len(checks)-1] != c.Score {
				checks = append(checks, c.Score)
			}
		}
		counts := countsAfterInsert(set, claims, checks, w)
		ok := admit(claims, checks, counts, nil, capsOf(limit), w, nil)
		for i, c := range claims {
			if ok[i] {
				for range c.N {
					set = append(set, c.Score)
				}
			}
		}
		if got := MaxInWindow(set, w); got > limit {
			t.Fatalf("limit %d, w %d, claims %v kept %v: a window holds %d", limit, w, claims, ok, got)
		}
	})
}

// FuzzNextSlots: whatever the set, the slots nextSlots computes fit (adding
// j+1 members at the tail at slot j keeps every window within the limit).
func FuzzNextSlots(f *testing.F) {
	f.Add(uint8(3), uint8(2), uint8(20), []byte{1, 5, 9, 30, 31, 32}, uint8(1))
	f.Add(uint8(1), uint8(1), uint8(1), []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, limit8, k8, w8 uint8, raw []byte, dropEvery uint8) {
		limit := 1 + int(limit8%8)
		k := 1 + int(k8)%limit
		w := 1 + int64(w8)
		set, dropped, clean := fuzzSet(raw, limit, w, dropEvery)
		extra := len(dropped)
		slots := nextSlots(zrange(set, -(limit+extra), -(limit-k+1)), dropped, limit, k, extra, w)
		last := int64(0)
		for _, s := range clean {
			last = max(last, s)
		}
		for j, s := range slots {
			if !bruteFits(clean, max(s, last), j+1, limit, w) {
				t.Fatalf("limit %d w %d set %v dropped %v: slot %d = %d does not fit %d", limit, w, clean, dropped, j, s, j+1)
			}
		}
	})
}

// FuzzSlotsUnder: the slots of a priority capped below the limit, read
// from a tail fetched for the cap, fit under the cap (adding j+1 members
// at slot j holds its neighbourhood within it), though the set, filled
// under the limit, may hold more than the cap in a window.
func FuzzSlotsUnder(f *testing.F) {
	f.Add(uint8(5), uint8(3), uint8(2), uint8(20), []byte{1, 5, 9, 30, 31, 32, 33, 34}, uint8(3))
	f.Add(uint8(1), uint8(0), uint8(1), uint8(1), []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, limit8, cap8, k8, w8 uint8, raw []byte, dropEvery uint8) {
		limit := 1 + int(limit8%8)
		capped := 1 + int(cap8)%limit
		k := 1 + int(k8)%capped
		w := 1 + int64(w8)
		set, dropped, clean := fuzzSet(raw, limit, w, dropEvery)
		extra := len(dropped)
		slots := nextSlots(zrange(set, -(capped+extra), -(capped-k+1)), dropped, capped, k, extra, w)
		last := int64(0)
		for _, s := range clean {
			last = max(last, s)
		}
		// The rule a claim is admitted by: the members within (g-w, g+w),
		// with it, number at most the cap. (The set itself may hold more
		// in a window: it was filled under the limit.)
		fits := func(g int64, n int) bool {
			in := n
			for _, s := range clean {
				if near(s, g, w) {
					in++
				}
			}
			return in <= capped
		}
		for j, s := range slots {
			if !fits(max(s, last), j+1) {
				t.Fatalf("limit %d cap %d w %d set %v dropped %v: slot %d = %d does not fit %d", limit, capped, w, clean, dropped, j, s, j+1)
			}
		}
	})
}

// capsOf is the caps of a limit every priority may fill.
func capsOf(limit int) levelCaps {
	var c levelCaps
	for l := range c {
		c[l] = limit
	}
	return c
}

// fuzzSet builds a set from raw scores, keeping those that fit under limit,
// and drops every dropEvery-th member (none for 0): the set sorted as Redis
// sorts it, the dropped members, and the scores of the others.
func fuzzSet(raw []byte, limit int, w int64, dropEvery uint8) (set, dropped []Entry, clean []int64) {
	var scores []int64
	for i, b := range raw {
		if s := int64(b); bruteFits(scores, s, 1, limit, w) {
			scores = append(scores, s)
			set = append(set, Entry{Score: s, Member: fmt.Sprint("m", i)})
		}
	}
	for i, e := range set {
		if dropEvery > 0 && i%int(dropEvery) == 0 {
			dropped = append(dropped, e)
		} else {
			clean = append(clean, e.Score)
		}
	}
	sort.Slice(set, func(i, j int) bool { return set[i].Less(set[j]) })
	return set, dropped, clean
}

// countsAfterInsert counts, for each check, the members within
// (check-w, check+w) as Redis returns them: after every claim's members
// were added to set.
func countsAfterInsert(set []int64, claims []Claim, checks []int64, w int64) []int64 {
	counts := make([]int64, len(checks))
	for i, h := range checks {
		for _, s := range set {
			if near(s, h, w) {
				counts[i]++
			}
		}
		for _, c := range claims {
			if near(c.Score, h, w) {
				counts[i] += int64(c.N)
			}
		}
	}
	return counts
}

// FullestWindow finds the first window that holds the most, and where it
// ends.
func TestFullestWindow(t *testing.T) {
	for _, c := range []struct {
		scores []int64
		most   int
		end    int64
		name   string
	}{
		{nil, 0, 0, "none"},
		{[]int64{30, 10, 20}, 3, 30, "all in one window, unsorted"},
		{[]int64{0, 5, 100, 101, 102, 250}, 4, 102, "5 to 102"},
		{[]int64{0, 10, 100, 110}, 2, 10, "two alike: the first"},
		{[]int64{0, 100}, 1, 0, "a window is half-open: (0, 100] does not hold 0"},
	} {
		if most, end := FullestWindow(c.scores, 100); most != c.most || end != c.end {
			t.Errorf("%s: FullestWindow(%v, 100) = %d, %d; want %d, %d", c.name, c.scores, most, end, c.most, c.end)
		}
	}
}
