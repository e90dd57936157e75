package throttler

import (
	"maps"
	"slices"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// owed is what this process still has to write to Redis, with the next
// round trip that works, guarded by the Throttler's mu. A worker runs while
// any of it is left (see workerState.pending), even in a process that only calls
// Allow.
type owed struct {
	giveBack []string     // members to remove: calls that did not go
	returned []core.Entry // the same, written for sure by a round trip that succeeded, at their scores
	giveUpAt time.Time    // after a failure: when members not given back yet stop mattering (zero = none pending)
	replay   []core.Entry // calls admitted without Redis (FallbackLocal; FailOpen's failed batch), to count once it answers
	// Calls admitted without Redis before the clock estimate had any
	// sample, by the runtime's clock when they went: scored, and then
	// replayed, once a sample comes in (the local clock may be seconds
	// off the server's).
	unscored  []time.Time
	mark      bool  // the marker was missing: write it
	healPause int64 // server µs: the end of a heal pause to write (0 = none); see heal.go

	// A round trip that failed may still be applied, late: a stalled
	// server reads the request of a connection its client closed after the
	// requests of newer ones, in any order. So what a failed round trip
	// added for its batch, or was to give back, goes with every round trip
	// until one planned after a round trip succeeded, which reaches the
	// server after every request it read before that success. A set: every
	// failure in a row doubts the same members again.
	recheck    map[string]struct{}
	recheckDue bool  // one did: the next round trip carries recheck
	latest     int64 // server µs: the latest score of a member in recheck (0 = none)
}

// pending reports whether anything is left to write.
func (o *owed) pending() bool {
	return len(o.giveBack) > 0 || len(o.returned) > 0 || len(o.replay) > 0 || len(o.unscored) > 0 || o.healPause > 0 || len(o.recheck) > 0
}

// doubt notes what failed attempt a may still write late: the members it
// added for batch (calls given back; under FailOpen, calls that go and
// are counted anew) and those it was to give back.
func (o *owed) doubt(a *core.Attempt, batch []*waiter) {
	if o.recheck == nil {
		o.recheck = map[string]struct{}{}
	}
	for _, m := range a.Remove {
		o.recheck[m] = struct{}{}
	}
	for _, e := range a.GiveBack { // given back again plainly: it may have left its bucket
		o.recheck[e.Member] = struct{}{}
	}
	for _, e := range a.Adds {
		if isOurs(e.Member, batch) {
			o.recheck[e.Member] = struct{}{}
			o.latest = max(o.latest, e.Score)
		}
	}
	o.recheckDue = false
}

// takeRecheck returns the members to give back again. Every round trip
// carries them (so the worker, which runs while they are listed, always has
// a round trip to make) until one planned after a round trip succeeded:
// that one takes them off the list.
func (o *owed) takeRecheck() []string {
	if len(o.recheck) == 0 {
		return nil
	}
	r := slices.Collect(maps.Keys(o.recheck))
	if o.recheckDue {
		o.recheck, o.recheckDue, o.latest = nil, false, 0
	}
	return r
}

// sent notes what attempt a, whose round trip succeeded, wrote: its heal
// pause, unless a later one is still to write, and whatever it had to give
// back after a failure. (Its give-backs and replays left the lists when it
// was planned: see take.)
func (o *owed) sent(a *core.Attempt) {
	if healSent(a, o.healPause) {
		o.healPause = 0
	}
	o.recheckDue = len(o.recheck) > 0
	o.giveUpAt = time.Time{}
}

// take returns what the next round trip writes, and leaves it to it: the
// members to remove (with those a failure doubts, see takeRecheck), the
// calls to give back that were written for sure, and the calls to count
// that went without Redis, appended to replay.
func (o *owed) take(replay []core.Entry) (core.Removals, []core.Entry) {
	out := core.Removals{Remove: append(o.giveBack, o.takeRecheck()...), GiveBack: o.returned}
	replay = append(replay, o.replay...)
	o.giveBack, o.returned, o.replay = nil, nil, nil
	return out, replay
}

// giveBackLater notes members to remove with the next round trip: calls
// that did not go.
func (o *owed) giveBackLater(members []string) { o.giveBack = append(o.giveBack, members...) }

// returnLater notes a call written for sure, at its score, to give back
// with the next round trip.
func (o *owed) returnLater(e core.Entry) { o.returned = append(o.returned, e) }

// replayLater notes a call admitted without Redis, at its score, to count
// once Redis answers.
func (o *owed) replayLater(es ...core.Entry) { o.replay = append(o.replay, es...) }

// heal notes a heal's pause until end (server µs) to write, with the
// marker; the later pause wins.
func (o *owed) heal(end int64) {
	o.healPause = max(o.healPause, end)
	o.mark = true
}

// healing reports whether a heal's pause is still to write.
func (o *owed) healing() bool { return o.healPause > 0 }

// takeMark reports whether the marker is owed, and leaves it to the round
// trip that asks.
func (o *owed) takeMark() bool {
	m := o.mark
	o.mark = false
	return m
}

// healPauseOwed is the end of the heal's pause still to write (server µs;
// 0: none).
func (o *owed) healPauseOwed() int64 { return o.healPause }

// markLater notes that the marker is still to write when mark is set.
func (o *owed) markLater(mark bool) { o.mark = o.mark || mark }

// forget drops everything owed: the client was closed, and nothing will be
// written again.
func (o *owed) forget() {
	o.replay, o.unscored, o.healPause, o.giveBack, o.returned, o.recheck = nil, nil, 0, nil, nil, nil
}

// giveUp drops, after a failure, the members still to give back once they
// stop counting on their own, within the crash bound: reserve-ahead plus
// the longest window w (µs) after the first failure to give them back, on
// the runtime's clock (rtNow; a local clock that stepped ahead would give
// them up at once), and once a member a failed round trip added, which may
// lie further ahead than reserve-ahead (scored by an estimate a clock
// step had made wrong), has left the longest window by the server's time
// serverNow.
func (o *owed) giveUp(rtNow time.Time, ahead time.Duration, w, serverNow int64) {
	if len(o.giveBack) == 0 && len(o.returned) == 0 && len(o.recheck) == 0 {
		return
	}
	if o.giveUpAt.IsZero() {
		o.giveUpAt = rtNow.Add(ahead + time.Duration(w)*time.Microsecond)
	}
	if !rtNow.Before(o.giveUpAt) && o.latest+w <= serverNow {
		o.giveBack, o.returned, o.recheck, o.latest = nil, nil, nil, 0
	}
}

// countLater notes n calls admitted without Redis, going at rt on the
// runtime's clock (at on the local one), to count in Redis once it
// answers. They are scored on the runtime's clock, for the local one may
// have stepped since the last sample (see core.Clock.ServerByRuntime); before any
// sample, once one comes in (see scoreUnscored).
func (o *owed) countLater(c *core.Clock, ids *memberSource, rt, at time.Time, n int) {
	if !c.Anchored() {
		for range n {
			o.unscored = append(o.unscored, rt)
		}
		return
	}
	serverAt := c.ServerByRuntime(rt, at)
	for range n {
		o.replay = append(o.replay, core.Entry{Score: serverAt, Member: ids.next()})
	}
}

// scoreUnscored scores the calls admitted without Redis before any clock
// sample, once one came in.
func (o *owed) scoreUnscored(c *core.Clock, ids *memberSource) {
	if len(o.unscored) == 0 || !c.Anchored() {
		return
	}
	for _, rt := range o.unscored {
		o.replay = append(o.replay, core.Entry{Score: c.ServerByRuntime(rt, time.Time{}), Member: ids.next()})
	}
	o.unscored = o.unscored[:0]
}

// trimReplay forgets replayed admissions that no longer matter to any
// window, the longest (w µs) included, which bounds the journal to about
// one window of calls.
func (o *owed) trimReplay(serverNow, w int64) {
	keep := o.replay[:0]
	for _, e := range o.replay {
		if e.Score > serverNow-w {
			keep = append(keep, e)
		}
	}
	clear(o.replay[len(keep):])
	o.replay = keep
	since := time.Duration(w) * time.Microsecond
	o.unscored = slices.DeleteFunc(o.unscored, func(rt time.Time) bool { return time.Since(rt) > since })
}

// unhold gives back what w's reservation holds: its members leave Redis
// with the next round trip, and its slot in the local share (local, nil
// without one) is freed. at is the score a round trip that succeeded wrote
// them at, or 0 when they may not have been written (see
// core.Attempt.GiveBack). The caller then replaces w's reservation.
func (o *owed) unhold(w *waiter, local *core.LocalWindow, at int64) {
	if at > 0 {
		for _, m := range w.res.members {
			o.returned = append(o.returned, core.Entry{Score: at, Member: m})
		}
	} else {
		o.giveBack = append(o.giveBack, w.res.members...)
	}
	w.freeShareLocked(local)
}
