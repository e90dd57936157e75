package core

import (
	"sync"
	"time"
)

// Clock estimates the Redis server's clock from the local one. A
// reservation round trip carries TIME at least every 250ms (every one, for a
// local clock without monotonic readings), so round trips are samples: the
// server read its clock somewhere between send and receive, so the offset
// (server minus local) lies within [server-recv, server-send].
// The estimate is the midpoint of the sample with the shortest round trip
// among the last few, which bounds its error by half that round trip. A
// sample that contradicts the estimate by more than a millisecond (a local
// clock step, or a server failover to a host with another clock) restarts
// the estimate from that sample.
//
// All window arithmetic uses server time, so replicas whose local clocks
// disagree by seconds still agree on the window.
//
// Local times are measured from a fixed local reading, the origin, with
// time.Time.Sub: on Go's monotonic clock when the readings carry it (as
// time.Now's do), so a step of the local wall clock (NTP, a VM resumed)
// changes no conversion, and the local times returned compare with
// deadlines on the monotonic clock too. A clock whose readings carry no
// monotonic reading (a fake from the throttler's WithClock, a simulation)
// is measured on its wall time: a step of it is seen only by the next
// sample, so such a clock is sampled on every round trip (see Monotonic),
// and a round whose sample restarts the estimate admits nothing (see
// Observe).
type Clock struct {
	origin    time.Time // local times are microseconds since it
	Monotonic bool      // the local clock's readings carry Go's monotonic reading

	mu      sync.Mutex
	samples [8]clockSample
	count   int
	next    int
	offset  int64  // microseconds, server minus local since origin
	rtt     int64  // microseconds, the shortest recent round trip
	gen     uint64 // how many times the estimate restarted (a clock step)
	// The runtime's own clock (time.Now, which never steps) when the last
	// sample came in, and the estimate's server time then: what
	// ServerByRuntime converts from.
	anchorRuntime time.Time
	anchorServer  int64
}

// NewClock returns an estimate that, until its first sample, takes the
// local clock for the server's.
func NewClock(origin time.Time) Clock {
	// Round(0) strips the monotonic reading: a reading equal to its
	// stripped self never had one.
	return Clock{origin: origin, Monotonic: origin != origin.Round(0), offset: origin.UnixMicro()}
}

// micros is local's time in microseconds since the origin.
func (c *Clock) micros(local time.Time) int64 { return local.Sub(c.origin).Microseconds() }

type clockSample struct {
	rtt, offset int64 // microseconds
}

// Observe records a round trip sent and received at local times sent and
// recv, during which the server read its clock as server. It reports
// whether the sample ruled out the estimate the round trip was planned
// with (a clock stepped): scores computed with it may be off by the step.
func (c *Clock) Observe(sent, recv, server time.Time) (stepped bool) {
	rtt := recv.Sub(sent).Microseconds()

	c.mu.Lock()
	defer c.mu.Unlock()
	if rtt < 0 {
		// Received before it was sent: the local clock stepped back during
		// the round trip, and the sample bounds nothing. Start over from
		// the next one (see Synced), and distrust what was planned with
		// this estimate.
		c.count, c.next = 0, 0
		c.gen++
		return true
	}
	mid := c.micros(sent) + rtt/2
	s := clockSample{rtt: rtt, offset: server.UnixMicro() - mid}
	// The true offset lies in [server-recv, server-send]. A sample that rules
	// out the current estimate means a clock stepped (or the estimate came
	// from a sample that was wrong): start over from it.
	lo, hi := server.UnixMicro()-c.micros(recv), server.UnixMicro()-c.micros(sent)
	// The estimate itself may be off by half its round trip: only a sample
	// that rules out that whole range, by more than a millisecond, tells
	// of a step.
	if slack := 1000 + c.rtt/2; c.count > 0 && (c.offset < lo-slack || c.offset > hi+slack) {
		c.count, c.next = 0, 0
		c.gen++
		stepped = true
	}
	c.samples[c.next] = s
	c.next = (c.next + 1) % len(c.samples)
	if c.count < len(c.samples) {
		c.count++
	}
	best := c.samples[0]
	for _, x := range c.samples[1:c.count] {
		if x.rtt < best.rtt {
			best = x
		}
	}
	c.offset, c.rtt = best.offset, best.rtt
	c.anchorRuntime, c.anchorServer = time.Now(), c.micros(recv)+c.offset
	return stepped
}

// ServerByRuntime converts a reading of the runtime's own clock (time.Now)
// to estimated server microseconds, from the last sample on: unlike the
// local clock (the throttler's WithClock), which may step while Redis
// cannot be reached to show it, the runtime's never does. Before any
// sample (see Anchored) it is Server(local), which takes the local clock
// for the server's: a caller that must not score by the local clock waits
// for a sample.
func (c *Clock) ServerByRuntime(rt time.Time, local time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.anchorRuntime.IsZero() {
		return c.micros(local) + c.offset
	}
	return c.anchorServer + rt.Sub(c.anchorRuntime).Microseconds()
}

// Anchored reports whether a sample came in: ServerByRuntime then
// converts from it, not from the local clock.
func (c *Clock) Anchored() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.anchorRuntime.IsZero()
}

// Synced reports whether at least one sample was taken.
func (c *Clock) Synced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count > 0
}

// Server converts a local time to estimated server microseconds.
func (c *Clock) Server(local time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.micros(local) + c.offset
}

// Since reports whether the estimate restarted after generation gen: a
// round trip planned with it proves nothing if the estimate restarts before
// its reply is read, whichever round trip's sample showed the step.
func (c *Clock) Since(gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen != gen
}

// Local converts server microseconds to the local clock's time.
func (c *Clock) Local(server int64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.origin.Add(time.Duration(server-c.offset) * time.Microsecond)
}

// ClockView is the estimate as it stood at one moment, a plain value: what
// a round is planned with, so that planning needs no lock.
type ClockView struct {
	origin time.Time
	offset int64  // microseconds, server minus local since origin
	RTT    int64  // microseconds, the shortest recent round trip
	Gen    uint64 // how many times the estimate restarted: a round planned in one generation and read in another proves nothing (see Clock.Since)
}

// View returns the estimate as it stands.
func (c *Clock) View() ClockView {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ClockView{origin: c.origin, offset: c.offset, RTT: c.rtt, Gen: c.gen}
}

// Server converts a local time to estimated server microseconds.
func (v ClockView) Server(local time.Time) int64 {
	return local.Sub(v.origin).Microseconds() + v.offset
}

// Local converts server microseconds to the local clock's time.
func (v ClockView) Local(server int64) time.Time {
	return v.origin.Add(time.Duration(server-v.offset) * time.Microsecond)
}
