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
	// added for its batch, or was to give back, is given back again by a
	// round trip planned after one succeeded, which reaches the server
	// after every request it read before that success (one still on its
	// way may come later: what it writes then counts no longer than a
	// crash's calls do, but see far). A set, each member
	// with the server time (µs) after which it counts nowhere and is
	// dropped: an outage of hours, with callers retrying through it, must
	// cost each round trip no more than a short one does (seed 21213).
	recheck    map[string]int64
	recheckDue bool  // one did: the next round trips carry recheck, recheckChunk at a time
	pruneAt    int   // the size of recheck at which prune next looks
	pruneBy    int64 // server µs: when prune next looks, whatever the size

	// The same for members scored further ahead than reserve-ahead, by a
	// clock estimate a step had made wrong: such a member, applied after
	// the round trip that gave it back again, would hold its slot past
	// the crash bound, until its own score leaves the window (seed 60797:
	// a stalled server applied a request of 134ms, scored 8.43s ahead by
	// a stepped clock, after two newer round trips that gave it back). So
	// it stays listed, and goes with a round trip every farEvery of the
	// runtime's clock, for farTail after the first round trip that
	// succeeded since the last failure, or until it counts nowhere if that
	// comes first. A server that answered a newer round trip reads again;
	// what the network still held of the failed one reaches it within
	// farTail (the simulator delays a request by at most 3s): one held
	// longer holds its slot until its score leaves the window, the clock's
	// error past the crash bound. Only clock errors make such members: the
	// list is empty otherwise.
	far     map[string]int64
	farDue  bool      // a round trip succeeded since the last failure
	farNext time.Time // the runtime's clock: when far goes again
	farEnd  time.Time // the runtime's clock: when far is dropped (zero: no success yet)
}

// farEvery is how often far goes again (see owed), and farTail for how long
// after the first round trip that succeeded since the last failure: eleven
// round trips at most, after a failure only, and only when a clock step scored a
// call beyond reserve-ahead.
const (
	farEvery = 500 * time.Millisecond
	farTail  = 5 * time.Second
)

// recheckChunk is the most members of recheck one round trip carries, so
// that giving back what a long outage doubted does not make one command of
// a size without bound.
const recheckChunk = 1024

// pending reports whether anything is left to write.
func (o *owed) pending() bool {
	return len(o.giveBack) > 0 || len(o.returned) > 0 || len(o.replay) > 0 || len(o.unscored) > 0 || o.healPause > 0 || len(o.recheck) > 0 || len(o.far) > 0
}

// doubt notes what failed attempt a may still write late: the members it
// added for batch (calls given back; under FailOpen, calls that go and
// are counted anew) and those it was to give back: plainly, or, when no
// key may be read compacted (compacts false: see mayCompact), as written
// for sure, which then was a plain removal too. Otherwise, those it was to
// give back as written for sure are not given back again: its request may
// still reach Redis (see core.Attempt.Resent). A member counts nowhere
// once the longest window (w µs) has passed its score; one to give back,
// whose score it does not know, once reserve-ahead and w (horizon µs) have
// passed serverNow, the server's time now, for no call of ours is scored
// further ahead. One whose score lies further ahead than that is listed in
// far (see owed).
func (o *owed) doubt(a *core.Attempt, batch []*waiter, serverNow, w, horizon int64, compacts bool) {
	if o.recheck == nil {
		o.recheck = map[string]int64{}
	}
	for _, m := range a.Remove {
		if _, ok := o.recheck[m]; !ok { // doubted again by a probe: it counts no longer than it did
			o.recheck[m] = serverNow + horizon
		}
	}
	if !compacts {
		for _, e := range a.GiveBack { // each was a plain removal
			o.doubtScored(e, serverNow, w, horizon)
		}
	}
	for _, e := range a.Adds {
		if isOurs(e.Member, batch) {
			o.doubtScored(e, serverNow, w, horizon)
		}
	}
	o.recheckDue, o.farDue, o.farEnd = false, false, time.Time{}
	o.prune(serverNow, w) // after: a member a probe carried again keeps its time
}

// doubtScored lists e, a member a failed round trip may write at its score:
// in far when the score lies beyond serverNow plus reserve-ahead (horizon
// less w), else in recheck.
func (o *owed) doubtScored(e core.Entry, serverNow, w, horizon int64) {
	until := e.Score + w
	if until <= serverNow+horizon {
		o.recheck[e.Member] = max(o.recheck[e.Member], until)
		return
	}
	if o.far == nil {
		o.far = map[string]int64{}
	}
	o.far[e.Member] = max(o.far[e.Member], until)
	delete(o.recheck, e.Member)
}

// prune drops the members of recheck that count nowhere by serverNow,
// when the list doubled since it last did or a sixteenth of the longest
// window (w µs) passed: each failure of an outage costs about the members
// it doubts, not the whole list, and a member stays at most w/16 past the
// time it stops counting.
func (o *owed) prune(serverNow, w int64) {
	if len(o.recheck) < o.pruneAt && serverNow < o.pruneBy {
		return
	}
	maps.DeleteFunc(o.recheck, func(_ string, until int64) bool { return until <= serverNow })
	maps.DeleteFunc(o.far, func(_ string, until int64) bool { return until <= serverNow })
	if len(o.far) == 0 {
		o.far = nil
	}
	o.pruneAt, o.pruneBy = max(2*len(o.recheck), recheckChunk), serverNow+w/16
	if len(o.recheck) == 0 {
		o.recheck, o.recheckDue = nil, false
	}
}

// takeRecheck returns members to give back again, at most recheckChunk.
// Once a round trip succeeded after the failures that doubted them, the
// round trips planned next carry them and take them off the list. Before,
// only a probe carries them (a round trip that has nothing else to send,
// made so that the worker, which runs while they are listed, learns when
// Redis answers again) and they stay: a round trip that fails gains
// nothing from carrying them.
func (o *owed) takeRecheck(probe bool) []string {
	if len(o.recheck) == 0 || !o.recheckDue && !probe {
		return nil
	}
	r := make([]string, 0, min(len(o.recheck), recheckChunk))
	for m := range o.recheck {
		if len(r) == recheckChunk {
			break
		}
		r = append(r, m)
		if o.recheckDue {
			delete(o.recheck, m)
		}
	}
	if len(o.recheck) == 0 {
		o.recheck, o.recheckDue = nil, false
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
	o.farDue = len(o.far) > 0
	o.giveUpAt = time.Time{}
}

// takeFar returns the members of far to give back again (see owed): those
// that still count at serverNow (server µs), at most recheckChunk, when
// farEvery has passed on the runtime's clock (rtNow) since they last went,
// and a round trip succeeded since the last failure, or probe (as for
// takeRecheck). They stay listed until they count nowhere, or farTail
// after the first success since the last failure.
func (o *owed) takeFar(probe bool, rtNow time.Time, serverNow int64) []string {
	maps.DeleteFunc(o.far, func(_ string, until int64) bool { return until <= serverNow })
	if o.farDue && o.farEnd.IsZero() {
		o.farEnd = rtNow.Add(farTail)
	}
	if len(o.far) == 0 || o.farDue && rtNow.After(o.farEnd) {
		o.far, o.farDue, o.farEnd = nil, false, time.Time{}
		return nil
	}
	if !o.farDue && !probe || rtNow.Before(o.farNext) {
		return nil
	}
	o.farNext = rtNow.Add(farEvery)
	r := make([]string, 0, min(len(o.far), recheckChunk))
	for m := range o.far {
		if len(r) == recheckChunk {
			break
		}
		r = append(r, m)
	}
	return r
}

// farWait is how long a worker with nothing else to send sleeps before far
// goes again, or is dropped (0 when far is empty; at least a millisecond
// otherwise).
func (o *owed) farWait(rtNow time.Time) time.Duration {
	if len(o.far) == 0 {
		return 0
	}
	next := o.farNext
	if !o.farEnd.IsZero() && o.farEnd.Before(next) { // set once a success came (see takeFar)
		next = o.farEnd.Add(time.Millisecond) // takeFar drops it after farEnd
	}
	return max(next.Sub(rtNow), time.Millisecond)
}

// farLast is how long far may go on as it stands: the latest score by
// which its members count nowhere (the server's clock, in µs; 0 when far is
// empty), and farEnd, after which it is dropped whatever the scores (the
// runtime's clock; zero until a round trip succeeded since the last
// failure).
func (o *owed) farLast() (until int64, end time.Time) {
	for _, u := range o.far {
		until = max(until, u)
	}
	return until, o.farEnd
}

// take returns what the next round trip writes, and leaves it to it: the
// members to remove (with those a failure doubts, see takeRecheck), the
// calls to give back that were written for sure, and the calls to count
// that went without Redis, appended to replay. queued says that callers
// wait, whose claims may give the round trip something to send; rtNow
// and serverNow are the runtime's clock and the server's time (µs), for
// far (see takeFar).
func (o *owed) take(replay []core.Entry, queued bool, rtNow time.Time, serverNow int64) (core.Removals, []core.Entry) {
	probe := !queued && len(o.giveBack) == 0 && len(o.returned) == 0 && len(o.replay) == 0
	remove := append(o.giveBack, o.takeRecheck(probe)...)
	out := core.Removals{Remove: append(remove, o.takeFar(probe, rtNow, serverNow)...), GiveBack: o.returned}
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
	o.replay, o.unscored, o.healPause, o.giveBack, o.returned, o.recheck, o.recheckDue = nil, nil, 0, nil, nil, nil, false
	o.far, o.farDue, o.farEnd = nil, false, time.Time{}
}

// giveUp drops, after a failure, the members still to give back once they
// stop counting on their own, within the crash bound: reserve-ahead plus
// the longest window w (µs) after the first failure to give them back, on
// the runtime's clock (rtNow; a local clock that stepped ahead would give
// them up at once); and the members a failed round trip may have written
// once each counts nowhere by the server's time serverNow (see doubt: one
// it added, which may lie further ahead than reserve-ahead, scored by an
// estimate a clock step had made wrong, once its score has left the
// longest window).
func (o *owed) giveUp(rtNow time.Time, ahead time.Duration, w, serverNow int64) {
	o.prune(serverNow, w)
	if len(o.giveBack) == 0 && len(o.returned) == 0 {
		return
	}
	if o.giveUpAt.IsZero() {
		o.giveUpAt = rtNow.Add(ahead + time.Duration(w)*time.Microsecond)
	}
	if !rtNow.Before(o.giveUpAt) {
		o.giveBack, o.returned = nil, nil
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

// notInStore is the score unhold takes for members that left the store
// with the round trip that wrote them (see core.CapRead).
const notInStore = -1

// unhold gives back what w's reservation holds: its members leave Redis
// with the next round trip, and its slot in the local share (local, nil
// without one) is freed. at is the score a round trip that succeeded wrote
// them at, or 0 when they may not have been written (see
// core.Attempt.GiveBack), or notInStore when the round trip that wrote
// them also removed them. The caller then replaces w's reservation.
func (o *owed) unhold(w *waiter, local *core.LocalWindow, at int64) {
	switch {
	case at == notInStore:
		// The store removed them already: nothing to give back.
	case at > 0:
		for _, m := range w.res.members {
			o.returned = append(o.returned, core.Entry{Score: at, Member: m})
		}
	default:
		o.giveBack = append(o.giveBack, w.res.members...)
	}
	w.freeShareLocked(local)
}
