package throttler

import "time"

// owed is what this process still has to write to Redis, with the next
// round trip that works, guarded by the Throttler's mu. A worker runs while
// any of it is left (see pendingLocked), even in a process that only calls
// Allow.
type owed struct {
	giveBack  []string  // members to remove: calls that did not go
	giveUpAt  time.Time // after a failure: when members not given back yet stop mattering (zero = none pending)
	replay    []entry   // calls admitted without Redis (FallbackLocal), to count once it answers
	mark      bool      // the marker was missing: write it
	healPause int64     // server µs: the end of a heal pause to write (0 = none); see heal.go
}

// pending reports whether anything is left to write.
func (o *owed) pending() bool {
	return len(o.giveBack) > 0 || len(o.replay) > 0 || o.healPause > 0
}

// sent notes what attempt a, whose round trip succeeded, wrote: its heal
// pause, unless a later one is still to write. (Its give-backs and replays
// left the lists when it was planned.)
func (o *owed) sent(a *attempt) {
	if a.pause >= o.healPause {
		o.healPause = 0
	}
}
