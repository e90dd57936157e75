package core

import (
	"sort"
)

// This file holds the window arithmetic, kept free of I/O so that it can be
// tested exhaustively and fuzzed. Times are Redis server time in microseconds.
//
// The invariant, over the scores of the members in the sorted set:
//
//	every half-open window (t-w, t] holds at most limit members,
//
// where w = interval + buffer. A member added at score g leaves it intact
// when the members already within (g-w, g+w) number at most limit-1: every
// window that holds g lies inside that range. Near the limit, under
// several limits, where a slot between members more than w apart must not
// be refused for the sum of both sides, rounds also read the fullest
// window that holds g (its peak: see redisstore.PeakScript, and
// CountScript for a compacted window).

// Claim is one caller's request within a reservation attempt: n members, all
// added at the same score.
type Claim struct {
	Score int64
	N     int
	First int   // the index of its first member in the attempt's adds
	Prio  Level // it fits only under its priority's cap (see Rules.Caps)
	// Where a store that places the claims itself (see Attempt.Place)
	// may put it, server µs: no earlier than Floor, no later than Last;
	// and when the room it would take lies past Reach (the horizon of
	// its wait), the claims after it in the round wait too, as they do
	// in Plan. Floor == Last: it goes at Score or not at all (an AllowN,
	// a slot of the local share).
	Floor, Last, Reach int64
}

// admit decides which claims of one attempt keep their members. All claims'
// members were added to the set before counting, so counts[i] (the members
// within (checks[i]-w, checks[i]+w) after the insert) includes every member of
// the attempt near checks[i]. checks must hold every claim's score. peaks,
// when not nil, holds for each check the most members not the attempt's
// own in any one window holding it (see Reply.Peaks): it stands for the
// count less the attempt's members (-1: not read), and is exact where the
// count would add up members on both sides of the check that no window
// holds together.
//
// Claims are kept greedily in order: a claim is kept when, with it and the
// claims kept before it within w, no checked score within w of it would see
// more than the cap of its priority (caps, none above the limit) in a
// window holding it. Because each count was taken after the attempt's own
// members were added, a kept claim satisfies the invariant whatever any
// other client does, in a transaction or not: a client that adds members
// later counts ours, including those about to be removed, and one that
// added earlier was counted here.
//
// The result is appended to ok[:0], whose storage it may reuse.
func admit(claims []Claim, checks []int64, counts, peaks []int64, caps levelCaps, w int64, ok []bool) []bool {
	var othersBuf, keptBuf [16]int64
	others, kept := othersBuf[:0], keptBuf[:0]
	if len(checks) > len(othersBuf) {
		others, kept = make([]int64, 0, len(checks)), make([]int64, 0, len(checks))
	}
	// others[i]: members near checks[i] that are not part of this attempt.
	others, kept = others[:len(checks)], kept[:len(checks)]
	clear(kept)
	for i, h := range checks {
		if peaks != nil && peaks[i] >= 0 {
			others[i] = peaks[i]
			continue
		}
		var ours int64
		for _, c := range claims {
			if near(c.Score, h, w) {
				ours += int64(c.N)
			}
		}
		others[i] = counts[i] - ours
	}
	ok = ok[:0]
	for range claims {
		ok = append(ok, false)
	}
	for ci, c := range claims {
		fits := true
		for i, h := range checks {
			if near(c.Score, h, w) && others[i]+kept[i]+int64(c.N) > int64(caps[c.Prio]) {
				fits = false
				break
			}
		}
		if !fits {
			continue
		}
		ok[ci] = true
		for i, h := range checks {
			if near(c.Score, h, w) {
				kept[i] += int64(c.N)
			}
		}
	}
	return ok
}

// near reports whether a member at score a lies within (h-w, h+w).
func near(a, h, w int64) bool {
	return a > h-w && a < h+w
}

// PlantEarlySlots plants a bug for the simulator's watchdog test: every
// free slot a reply tells of is computed this many thousandths of the
// window early, so that claims at them are refused and claimed again
// without virtual time moving. Zero everywhere else.
var PlantEarlySlots int64

// nextSlots returns, for j = 0..k-1, the earliest score at which j+1 members
// could be added at the tail of the set, once the members in dropped (this
// process's rejected members, still in the set until the next attempt removes
// them) are gone, with at most limit members in any window holding them (a
// limit, or a priority's cap under it: see Rules.Caps). A returned
// value of 0 means "now": fewer than limit members remain in play. The
// slice is cut short where tail does not reach.
//
// tail is what ZRANGE key -(limit+extra) -(limit-k+1) WITHSCORES returned,
// ascending, with extra >= len(dropped) and 1 <= k <= limit. Its last element,
// when there is one, is the (limit-k+1)-th largest member; each earlier one
// is one rank further from the top. A tail shorter than extra+k means the set
// ran out below it: the missing ranks do not exist.
func nextSlots(tail []Entry, dropped []Entry, limit, k, extra int, w int64) []int64 {
	drop := append([]Entry(nil), dropped...)
	sort.Slice(drop, func(i, j int) bool { return drop[i].Less(drop[j]) })
	isDropped := func(e Entry) bool {
		i := sort.Search(len(drop), func(i int) bool { return !drop[i].Less(e) })
		return i < len(drop) && drop[i] == e
	}
	// droppedAbove counts dropped members ranked above e.
	droppedAbove := func(e Entry) int {
		i := sort.Search(len(drop), func(i int) bool { return e.Less(drop[i]) })
		return len(drop) - i
	}
	// byRank maps the rank from the top (0 = largest) in the set without the
	// dropped members to the score found there.
	byRank := make(map[int]int64, len(tail))
	for i, e := range tail {
		if isDropped(e) {
			continue
		}
		rankAfter := (limit - k) + (len(tail) - 1 - i)
		byRank[rankAfter-droppedAbove(e)] = e.Score
	}
	clamped := len(tail) < extra+k
	slots := make([]int64, 0, k)
	for j := 0; j < k; j++ {
		// The (j+1)-th member added at the tail needs the (limit-j)-th largest
		// member (rank limit-1-j from the top) to be w behind it.
		s, ok := byRank[limit-1-j]
		switch {
		case ok:
			slots = append(slots, s+w-w*PlantEarlySlots/1000)
		case clamped:
			slots = append(slots, 0)
		default:
			return slots
		}
	}
	return slots
}
