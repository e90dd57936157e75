package core

import (
	"math/rand/v2"
	"time"
)

// Rules is what a Throttler plans and resolves its rounds by: its limits
// (Wins[0] the one the throttler's New was given, the others from its
// WithLimit) and the settings New checked, with the timings that follow
// from them. It never changes after New, so it is read without a lock.
type Rules struct {
	Wins     []Window
	MinLimit int           // the smallest configured limit: the most one call may claim
	MaxBatch int           // the most units one round trip claims: 64 (options.go's maxBatch; no option sets it)
	Ahead    time.Duration // WithReserveAhead
	Buffer   time.Duration // WithBuffer
	Shares   [Levels]int   // WithPriorityShare, in thousandths, by level
}

// Level is a priority's rank, 0 for the lowest (see the throttler's
// Priority). The zero Level is Low, unlike the zero Priority.
type Level uint8

// The levels of the throttler's priorities.
const (
	Low Level = iota
	Normal
	High
)

// LongestW is how long a call counts in the longest of its windows, in
// microseconds.
func (c *Rules) LongestW() int64 {
	w := int64(0)
	for _, x := range c.Wins {
		w = max(w, x.W)
	}
	return w
}

// BatchUnits is how many members one round trip may add, and how many
// upcoming slots it learns.
func (c *Rules) BatchUnits() int { return min(c.MinLimit, c.MaxBatch) }

// Quiet is the longest a worker with waiters goes without a round trip,
// and so the longest a shared pause, a lowered limit or a lost window goes
// unnoticed by a process with callers waiting: QuietFloor, or a hundredth of
// the first limit's window if longer. Safety does not rest on it (a heal
// pause covers every call the lost window held, and a waiter learns of a
// pause when it reserves); it only bounds how stale Stats and the known
// free slots get, and on an hour-long window a round trip every 500ms per
// process would cost far more than it tells.
func (c *Rules) Quiet() time.Duration {
	return max(QuietFloor, time.Duration(c.Wins[0].W)*time.Microsecond/100)
}

// QuietFloor is the least Quiet returns: what it returns for a first window
// of up to 50s.
const QuietFloor = 500 * time.Millisecond

// Jitter spreads the wake-ups of processes waiting for slots to come within
// reach. A slot becomes reservable reserve-ahead before its time, so waking
// up to a quarter of reserve-ahead later loses nothing: the slot is still
// reserved well before it is due, and by then several have come within
// reach, to be taken in one round trip. Processes waking at random points
// of that span take turns instead of all racing for each slot.
func (c *Rules) Jitter(r *rand.Rand) time.Duration {
	return time.Duration(r.Int64N(int64(c.JitterSpan()) + 1))
}

// TurnJitter is the jitter of a process waking for slots after it lost
// lost turns in a row (see Known.Lost): a random point of the band from
// span/(lost+2) to span/(lost+1) of the jitter span, so that a process that
// lost more turns in a row wakes ahead of every one that lost fewer, and
// turns go roughly to those that waited longest instead of by the draw
// alone.
func (c *Rules) TurnJitter(r *rand.Rand, lost int) time.Duration {
	span, k := int64(c.JitterSpan()), int64(min(lost, 1<<20))
	lo, hi := span/(k+2), span/(k+1)
	return time.Duration(lo + r.Int64N(hi-lo+1))
}

// JitterSpan is the span Jitter draws from: a quarter of reserve-ahead, at
// most 250ms, or the spacing of the limit's slots if longer (at most 10ms),
// but never more than half of reserve-ahead, so that a process that wakes
// at the end of the span still reserves its slot before it is due.
func (c *Rules) JitterSpan() time.Duration {
	spacing := time.Duration(c.Wins[0].W) * time.Microsecond / time.Duration(c.Wins[0].Limit)
	return min(max(min(c.Ahead/4, 250*time.Millisecond), min(spacing, 10*time.Millisecond)), c.Ahead/2)
}

// FairShare is how many slots a round near the limit may take: about a
// twenty-fourth of the limit, so that the first process to wake does not
// reserve a whole window ahead of the others, which wake at random points of
// the jitter span and take their own shares. A share is what one turn is
// worth: with many processes each gets few turns a window, and larger turns
// make their counts lumpier; smaller turns cost round trips (a thirty-second
// measured 1.0 round trips per admission in the bench's herd, a
// twenty-fourth 0.7 with claims announced: see Known.Announce).
func (c *Rules) FairShare() int {
	return max(1, min(c.BatchUnits(), (c.Wins[0].Limit+23)/24))
}

// Share is how many slots a round near the limit may take when this
// process's round trips take rtt (µs, the shortest recent one): its fair
// share, or, when more, the slots the first limit frees in one round trip
// (its limit over its window, times rtt), a batch at most. A process's
// claims take a round trip to land, and its next claims another: while
// they travel, the processes whose round trips are short take turn after
// turn, and at the line past which no turn is waited for (see SharePause)
// each takes share after share in well under a millisecond. A process
// whose round trip is long gets one round per round trip whatever it
// does, so each of its rounds may take what the window frees meanwhile,
// as the others could have. For round trips of a few milliseconds or
// less this is the fair share.
func (c *Rules) Share(rtt int64) int {
	w := c.Wins[0]
	perTrip := (int64(w.Limit)*max(rtt, 0) + w.W - 1) / max(w.W, 1)
	return max(c.FairShare(), int(min(perTrip, int64(c.BatchUnits()))))
}

// StaleSlots reports whether the free slots a reply tells of are stale by
// the time the next round's claims reach Redis, for a process whose round
// trips take rtt (µs, the shortest recent one): the first limit frees a
// slot, on average, in less than a round trip, so the processes with
// shorter round trips may have taken the slots it would claim. Its rounds
// near the limit then let the store place their claims where it finds
// room (see Attempt.Place), which costs Redis a script's run per round
// (some 40µs on a 2-core machine, against the rounds lost to stale
// slots); below that, a reply's slots are as good as fresh.
func (c *Rules) StaleSlots(rtt int64) bool {
	w := c.Wins[0]
	return int64(w.Limit)*max(rtt, 0) >= w.W
}

// SharePause is how long a worker waits after taking a full share of slots
// ahead of their time, when the next free slot is due in lead and its round
// trips take rtt: its turn is over. The others wake at a random point of the
// jitter span after the slots they want come within reach; this worker waits
// a whole span, then a random part of another, so that it comes back after
// them and processes take turns, instead of the first to wake taking share
// after share. The pause ends, though, once the next free slot is within half
// of reserve-ahead of its time: a process alone, with nobody to take the
// turn, then takes share after share, one round trip each, and every slot is
// still reserved well before it is due. A window frees slots in the pattern
// it filled them in, often a burst, and a slot taken late stays late in every
// later window.
//
// Both are counted where the worker's claims land, in Redis: its last ones
// landed some of a round trip before their reply came back, its next ones
// land the rest of one after it sends them, so its turns are rtt longer
// than its pauses; and a slot lead away by the clock estimate is lead-rtt/2
// away when a claim sent now lands (the estimate puts the server's reading
// of its clock in the middle of the round trip: off by half the link's
// asymmetry, which moves where the claim lands by as much the other way).
// For round trips of a millisecond this is the pause it always was; a
// process whose round trips take 150ms would otherwise come back a round
// trip after the others, when what was left of a burst of free slots is
// gone (issue 40).
func (c *Rules) SharePause(r *rand.Rand, lead, rtt time.Duration) time.Duration {
	return max(0, min(c.JitterSpan()+c.Jitter(r)-rtt, lead-rtt/2-c.Ahead/2))
}

// TTL keeps every key alive for as long as its newest member can matter in any
// of them: a member is at most ahead in the future and counts for the longest
// window after its score. One TTL for every key: the first key, which holds
// the marker, then lives as long as any other, so a marker found missing
// within a TTL of a round trip that saw it tells that Redis lost the window,
// whichever key holds the calls that still count.
func (c *Rules) TTL() time.Duration {
	return time.Duration(c.LongestW())*time.Microsecond + c.Ahead + 2*time.Second
}

// Longest returns the index of the limit with the longest window: the key
// that keeps a call's member the longest, where the probe is looked up.
func (c *Rules) Longest() int {
	i := 0
	for j, x := range c.Wins {
		if x.W > c.Wins[i].W {
			i = j
		}
	}
	return i
}

// levelCaps is, by level, the most calls a window holding a call of that
// priority may hold with it.
type levelCaps [Levels]int

// Caps returns each priority's cap under the limit lim.
func (c *Rules) Caps(lim int) levelCaps {
	var out levelCaps
	for l, share := range c.Shares {
		out[l] = max(1, lim*share/1000)
	}
	return out
}

// CapUnder is the most units one call of priority p may take while the
// tightest limit in force is lowest: a priority's cap only grows with the
// limit, so the tightest limit's cap is the least of them all.
func (c *Rules) CapUnder(lowest int, p Level) int {
	return c.Caps(lowest)[p]
}

// Capped reports whether calls of priority p may fill less than the whole
// limit: the free slots under the limit are not theirs.
func (c *Rules) Capped(p Level) bool {
	return c.Shares[p] < 1000
}

// SmallestCap is the smallest cap under lim of the priorities in mask (a bit
// per level) and of the highest priority.
func (c *Rules) SmallestCap(mask uint8, lim int) int {
	caps := c.Caps(lim)
	low := caps[Levels-1]
	for l, cp := range caps {
		if mask&(1<<l) != 0 {
			low = min(low, cp)
		}
	}
	return low
}

// LowCaps returns, for a round trip learning k free slots (none when k is
// 0), for each priority in mask (a bit per level) that may fill less than
// the whole limit, its cap under each limit in lims: the round trip learns
// its free slots too. The slices of buf are reused.
func (c *Rules) LowCaps(mask uint8, k int, lims []int, buf [Levels][]int) [Levels][]int {
	for l := range Levels {
		buf[l] = buf[l][:0]
		if k == 0 || mask&(1<<l) == 0 || !c.Capped(Level(l)) {
			continue
		}
		for _, lim := range lims {
			buf[l] = append(buf[l], c.Caps(lim)[l])
		}
	}
	return buf
}

// CappedAhead is how far ahead (µs) a call of a priority held to a share of
// the limit may reserve a slot: at most the time the first limit's
// interval takes to pass through the room the share leaves to the higher
// priorities ((1 - share) x interval), and at most WithReserveAhead's.
func (c *Rules) CappedAhead(p Level) int64 {
	left := int64(1000 - c.Shares[p])
	return min(c.Ahead.Microseconds(), c.Wins[0].Interval.Microseconds()*left/1000)
}
