package throttler

import (
	"math/rand/v2"
	"time"
)

// config is what New was given, checked, and what follows from it: the
// limits and options, and the timings derived from them. It never changes
// after New, so it is read without the Throttler's mutex.
type config struct {
	wins     []window // wins[0] is the limit New was given; the others come from WithLimit
	opt      options
	minLimit int // the smallest configured limit: the most one call may claim
}

// now reads the local clock (WithClock's, or time.Now).
func (c *config) now() time.Time { return c.opt.now() }

// longestW is how long a call counts in the longest of its windows, in
// microseconds.
func (c *config) longestW() int64 {
	w := int64(0)
	for _, x := range c.wins {
		w = max(w, x.w)
	}
	return w
}

// batchUnits is how many members one round trip may add, and how many
// upcoming slots it learns.
func (c *config) batchUnits() int { return min(c.minLimit, c.opt.maxBatch) }

// quiet is the longest a worker with waiters goes without a round trip,
// and so the longest a shared pause, a lowered limit or a lost window goes
// unnoticed by a process with callers waiting: maxQuiet, or a hundredth of
// the first limit's window if longer. Safety does not rest on it (a heal
// pause covers every call the lost window held, and a waiter learns of a
// pause when it reserves); it only bounds how stale Stats and the known
// free slots get, and on an hour-long window a round trip every 500ms per
// process would cost far more than it tells.
func (c *config) quiet() time.Duration {
	return max(maxQuiet, time.Duration(c.wins[0].w)*time.Microsecond/100)
}

const maxQuiet = 500 * time.Millisecond

// jitter spreads the wake-ups of processes waiting for slots to come within
// reach. A slot becomes reservable reserve-ahead before its time, so waking
// up to a quarter of reserve-ahead later loses nothing: the slot is still
// reserved well before it is due, and by then several have come within
// reach, to be taken in one round trip. Processes waking at random points
// of that span take turns instead of all racing for each slot.
func (c *config) jitter(r *rand.Rand) time.Duration {
	spacing := time.Duration(c.wins[0].w) * time.Microsecond / time.Duration(c.wins[0].limit)
	spread := max(min(c.opt.ahead/4, 250*time.Millisecond), min(spacing, 10*time.Millisecond))
	return time.Duration(r.Int64N(int64(spread) + 1))
}

// fairShare is how many slots a round near the limit may take: about a
// sixteenth of the limit, so that the first process to wake does not reserve a
// whole window ahead of the others, which wake at random points of the
// jitter span and take their own shares.
func (c *config) fairShare() int {
	return max(1, min(c.batchUnits(), (c.wins[0].limit+15)/16))
}

// sharePause is how long a worker waits after taking a full share: random,
// with a mean of 90% of the time the window takes to free a share's worth of
// slots (w*share/limit) when it frees them evenly; but short enough for one
// process to reserve a whole limit's worth of slots, share by share, within
// half of reserve-ahead. A window frees slots in the pattern it filled them
// in, often a burst (a limit's worth at once, a window after a burst of
// admissions): a longer pause lets the burst's slots come due before anyone
// reserved them, and each slot taken late stays late in every later window.
// (The simulation's calm seeds 8 and 64 used 96-98% of the quota with the
// uncapped pause: a third of each burst taken 50-270ms late.)
func (c *config) sharePause(r *rand.Rand) time.Duration {
	share := float64(c.fairShare()) / float64(c.wins[0].limit)
	mean := 0.9 * float64(c.wins[0].w) * float64(time.Microsecond) * share
	return time.Duration(r.Int64N(int64(min(time.Duration(2*mean), time.Duration(float64(c.opt.ahead)*share))) + 1))
}

// ttl keeps every key alive for as long as its newest member can matter in
// any of them: a member is at most ahead in the future and counts for the
// longest window after its score. One TTL for every key: the first key,
// which holds the marker, then lives as long as any other, so a marker
// found missing within a TTL of a round trip that saw it tells that Redis
// lost the window, whichever key holds the calls that still count
// (simulation seed 2370: a second limit's 27s window was lost and went
// unnoticed, the first's 7s TTL having passed).
func (c *config) ttl() time.Duration {
	return time.Duration(c.longestW())*time.Microsecond + c.opt.ahead + 2*time.Second
}

// longest returns the index of the limit with the longest window: the key
// that keeps a call's member the longest, where the probe is looked up.
func (c *config) longest() int {
	i := 0
	for j, x := range c.wins {
		if x.w > c.wins[i].w {
			i = j
		}
	}
	return i
}
