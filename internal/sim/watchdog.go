package sim

import (
	"fmt"
	"sync"
	"time"
)

// LivelockRoundTrips is how many requests a Network lets its clients write
// within one virtual millisecond before it calls the run a livelock. In a
// bubble, virtual time moves only while every goroutine is blocked: a
// client that claims, is refused and claims again at once, round trip
// after round trip, keeps it still, and a seed would otherwise run on in
// wall time until go test's timeout, unnamed. The busiest millisecond of
// the first 150 seeds holds 467 requests at most (Network.Busiest).
const LivelockRoundTrips = 5_000

// watchdog counts the requests written in the current virtual
// millisecond, and what it saw when there were too many.
type watchdog struct {
	mu      sync.Mutex
	since   time.Time // the start of the millisecond counted
	n       int       // requests written since
	busiest int       // the most in one millisecond, so far
	limit   int       // LivelockRoundTrips, unless set otherwise
	tripped string    // what it saw, once it called a livelock
}

// wrote counts a request from replica, its first command cmd, at now
// (virtual), and reports whether the run is a livelock: once it is, every
// later request is refused too, so that the clients fail their calls,
// sleep and let the run end.
func (d *watchdog) wrote(now time.Time, replica int, cmd string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tripped != "" {
		return true
	}
	if now.Sub(d.since) >= time.Millisecond {
		d.since, d.n = now, 0
	}
	d.n++
	d.busiest = max(d.busiest, d.n)
	limit := d.limit
	if limit == 0 {
		limit = LivelockRoundTrips
	}
	if d.n > limit {
		d.tripped = fmt.Sprintf("%d requests written within one virtual millisecond from %s (the last from replica %d: %s): a livelock, virtual time standing still",
			d.n, d.since.Format("15:04:05.000000"), replica, cmd)
		return true
	}
	return false
}

// Livelock returns what the network's watchdog saw when it called the run
// a livelock (see LivelockRoundTrips), or "" when it did not.
func (n *Network) Livelock() string {
	n.watch.mu.Lock()
	defer n.watch.mu.Unlock()
	return n.watch.tripped
}

// Busiest returns the most requests written within one virtual
// millisecond so far.
func (n *Network) Busiest() int {
	n.watch.mu.Lock()
	defer n.watch.mu.Unlock()
	return n.watch.busiest
}

// SetLivelockRoundTrips sets how many requests within one virtual
// millisecond the network calls a livelock, in place of
// LivelockRoundTrips: a test of the watchdog sets fewer, to trip sooner.
func (n *Network) SetLivelockRoundTrips(limit int) {
	n.watch.mu.Lock()
	defer n.watch.mu.Unlock()
	n.watch.limit = limit
}
