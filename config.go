package throttler

import (
	"math/rand/v2"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// config is what New was given, checked, and what follows from it: the
// limits and options, and the timings derived from them. It never changes
// after New, so it is read without the Throttler's mutex.
type config struct {
	wins     []core.Window // wins[0] is the limit New was given; the others come from WithLimit
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
		w = max(w, x.W)
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
	return max(maxQuiet, time.Duration(c.wins[0].W)*time.Microsecond/100)
}

const maxQuiet = 500 * time.Millisecond

// jitter spreads the wake-ups of processes waiting for slots to come within
// reach. A slot becomes reservable reserve-ahead before its time, so waking
// up to a quarter of reserve-ahead later loses nothing: the slot is still
// reserved well before it is due, and by then several have come within
// reach, to be taken in one round trip. Processes waking at random points
// of that span take turns instead of all racing for each slot.
func (c *config) jitter(r *rand.Rand) time.Duration {
	return time.Duration(r.Int64N(int64(c.jitterSpan()) + 1))
}

// turnJitter is the jitter of a process waking for slots after it lost
// lost turns in a row (see known.lost): a random point of the band from
// span/(lost+2) to span/(lost+1) of the jitter span, so that a process that
// lost more turns in a row wakes ahead of every one that lost fewer, and
// turns go roughly to those that waited longest instead of by the draw
// alone.
func (c *config) turnJitter(r *rand.Rand, lost int) time.Duration {
	span, k := int64(c.jitterSpan()), int64(min(lost, 1<<20))
	lo, hi := span/(k+2), span/(k+1)
	return time.Duration(lo + r.Int64N(hi-lo+1))
}

// jitterSpan is the span jitter draws from: a quarter of reserve-ahead, at
// most 250ms, or the spacing of the limit's slots if longer (at most 10ms),
// but never more than half of reserve-ahead, so that a process that wakes
// at the end of the span still reserves its slot before it is due.
func (c *config) jitterSpan() time.Duration {
	spacing := time.Duration(c.wins[0].W) * time.Microsecond / time.Duration(c.wins[0].Limit)
	return min(max(min(c.opt.ahead/4, 250*time.Millisecond), min(spacing, 10*time.Millisecond)), c.opt.ahead/2)
}

// fairShare is how many slots a round near the limit may take: about a
// thirty-second of the limit, so that the first process to wake does not
// reserve a whole window ahead of the others, which wake at random points of
// the jitter span and take their own shares. A share is what one turn is
// worth: with many processes each gets few turns a window, and larger turns
// make their counts lumpier.
func (c *config) fairShare() int {
	return max(1, min(c.batchUnits(), (c.wins[0].Limit+31)/32))
}

// sharePause is how long a worker waits after taking a full share of slots
// ahead of their time, when the next free slot is due in lead: its turn is
// over. The others wake at a random point of the jitter span after the slots
// they want come within reach; this worker waits a whole span, then a random
// part of another, so that it comes back after them and processes take turns,
// instead of the first to wake taking share after share. The pause ends,
// though, once the next free slot is within half of reserve-ahead of its time:
// a process alone, with nobody to take the turn, then takes share after share,
// one round trip each, and every slot is still reserved well before it is due.
// A window frees slots in the pattern it filled them in, often a burst, and a
// slot taken late stays late in every later window.
func (c *config) sharePause(r *rand.Rand, lead time.Duration) time.Duration {
	return min(c.jitterSpan()+c.jitter(r), max(0, lead-c.opt.ahead/2))
}

// ttl keeps every key alive for as long as its newest member can matter in any
// of them: a member is at most ahead in the future and counts for the longest
// window after its score. One TTL for every key: the first key, which holds
// the marker, then lives as long as any other, so a marker found missing
// within a TTL of a round trip that saw it tells that Redis lost the window,
// whichever key holds the calls that still count.
func (c *config) ttl() time.Duration {
	return time.Duration(c.longestW())*time.Microsecond + c.opt.ahead + 2*time.Second
}

// longest returns the index of the limit with the longest window: the key
// that keeps a call's member the longest, where the probe is looked up.
func (c *config) longest() int {
	i := 0
	for j, x := range c.wins {
		if x.W > c.wins[i].W {
			i = j
		}
	}
	return i
}

// newConfig checks New's arguments and options, and returns the
// configuration they make, or an error wrapping ErrInvalidArgument.
func newConfig(key string, limit int, interval time.Duration, opts []Option) (config, error) {
	if err := checkWindow("New", key, limit, interval); err != nil {
		return config{}, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			return config{}, invalidf("New(%q): nil Option", key)
		}
		if err := opt(&o); err != nil {
			return config{}, err
		}
	}
	if err := checkShares(o.shares); err != nil {
		return config{}, err
	}
	if o.buffer > interval*10 && o.buffer > time.Minute {
		return config{}, invalidf("New(%q): buffer %s dwarfs the interval %s", key, o.buffer, interval)
	}
	if !o.aheadSet {
		o.ahead = min(interval, time.Second)
	}
	wins := append([]core.Window{{Key: key, Limit: limit, Interval: interval}}, o.extra...)
	for i := range wins {
		wins[i].W = windowMicros(wins[i].Interval + o.buffer)
		if err := sameSlot(wins[0].Key, wins[i].Key); err != nil {
			return config{}, err
		}
		for _, x := range wins[:i] {
			if x.Key == wins[i].Key {
				return config{}, invalidf("New(%q): key %q holds two limits", key, x.Key)
			}
		}
	}
	if o.inflight != nil {
		if err := sameSlot(wins[0].Key, o.inflight.Key); err != nil {
			return config{}, err
		}
		for _, x := range wins {
			if x.Key == o.inflight.Key {
				return config{}, invalidf("New(%q): WithInFlight's key %q also holds a limit", key, x.Key)
			}
		}
	}
	c := config{wins: wins, opt: o, minLimit: limit}
	for _, x := range wins[1:] {
		c.minLimit = min(c.minLimit, x.Limit)
	}
	return c, nil
}
