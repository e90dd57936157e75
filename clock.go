package throttler

import (
	"sync"
	"time"
)

// clockSync estimates the Redis server's clock from the local one. Every
// reservation carries TIME in its transaction, so each round trip is a
// sample: the server read its clock somewhere between send and receive, so
// the offset (server minus local) lies within [server-recv, server-send].
// The estimate is the midpoint of the sample with the shortest round trip
// among the last few, which bounds its error by half that round trip. A
// sample that contradicts the estimate by more than a millisecond (a local
// clock step, or a server failover to a host with another clock) restarts
// the estimate from that sample.
//
// All window arithmetic uses server time, so replicas whose local clocks
// disagree by seconds still agree on the window.
type clockSync struct {
	mu      sync.Mutex
	samples [8]clockSample
	count   int
	next    int
	offset  int64 // microseconds, server minus local
	rtt     int64 // microseconds, the shortest recent round trip
}

type clockSample struct {
	rtt, offset int64 // microseconds
}

// observe records a round trip sent and received at local times sent and
// recv, during which the server read its clock as server.
func (c *clockSync) observe(sent, recv, server time.Time) {
	rtt := recv.Sub(sent).Microseconds()
	if rtt < 0 {
		rtt = 0
	}
	mid := sent.UnixMicro() + rtt/2
	s := clockSample{rtt: rtt, offset: server.UnixMicro() - mid}

	c.mu.Lock()
	defer c.mu.Unlock()
	// The true offset lies in [server-recv, server-send]. A sample that rules
	// out the current estimate means a clock stepped (or the estimate came
	// from a sample that was wrong): start over from it.
	lo, hi := server.UnixMicro()-recv.UnixMicro(), server.UnixMicro()-sent.UnixMicro()
	if c.count > 0 && (c.offset < lo-1000 || c.offset > hi+1000) {
		c.count, c.next = 0, 0
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
}

// roundTrip returns the shortest recent round trip in microseconds: a call
// admitted by a reply goes about this long after the attempt was planned.
func (c *clockSync) roundTrip() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rtt
}

// synced reports whether at least one sample was taken.
func (c *clockSync) synced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count > 0
}

// server converts a local time to estimated server microseconds.
func (c *clockSync) server(local time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return local.UnixMicro() + c.offset
}

// local converts server microseconds to the local clock's time.
func (c *clockSync) local(server int64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.UnixMicro(server - c.offset)
}
