package throttler

import "slices"

// A waiter's reservation and its caller's presence change in one place,
// moveLocked, and only by the moves the table below allows. The worker
// moves a call through the round (queued, in flight, then admitted, failed
// or refused, or queued again); the fallback settles what Redis could not;
// the caller itself leaves (abandon) or ends its wait (await).

// stand is where a waiter stands: its reservation's state and its caller's
// presence.
type stand struct {
	state  waitState
	caller presence
}

// moveLocked replaces w's reservation with r and its caller's presence
// with p: the only place either changes. A move to a state the caller
// waits for (admitted, failed, refused) that leaves its presence as it was
// wakes it. A move the table does not allow is reported to badMove (tests
// fail on it) and made all the same: the table documents the machine, and
// a bug it finds is not made worse by a second one.
func (w *waiter) moveLocked(r reservation, p presence) {
	from, to := stand{w.res.state, w.caller}, stand{r.state, p}
	if badMove != nil && !allowedMove(from, to) {
		badMove(from, to)
	}
	wake := p == w.caller && (r.state == stAdmitted || r.state == stFailed || r.state == stRefused)
	w.res, w.caller = r, p
	if wake {
		w.signal()
	}
}

// badMove, when set (by tests), hears of every move the table does not
// allow.
var badMove func(from, to stand)

// moves is the table of the moves a waiter may make, from each stand: every
// stand is listed, those no move leaves with none.
var moves = map[stand][]stand{
	// Queued again (submit), into a round trip's batch, served by the
	// fallback (admitted, failed, refused), failed by the plan or shed
	// from a full queue, or its caller gone (abandon).
	{stQueued, present}: {{stQueued, present}, {stInFlight, present}, {stAdmitted, present}, {stFailed, present}, {stRefused, present}, {stFailed, gone}},
	{stQueued, leaving}: nil,
	{stQueued, gone}:    nil,
	// The round trip's outcome, or its caller leaving while it is out.
	{stInFlight, present}: {{stQueued, present}, {stAdmitted, present}, {stFailed, present}, {stRefused, present}, {stInFlight, leaving}},
	// Its caller waits for the reply, which fails it (what it holds, the
	// caller gives back) or, failing open, admits it (the caller gives its
	// slot back), or gives up waiting (gone).
	{stInFlight, leaving}: {{stFailed, leaving}, {stAdmitted, leaving}, {stInFlight, gone}},
	// The reply fails it: what it holds is the worker's to give back; or,
	// failing open, admits it, with nothing to give back.
	{stInFlight, gone}: {{stFailed, gone}, {stAdmitted, gone}},
	// Its slot given back: queued anew (a pause, a lowered limit, a late
	// wake), refused (an AllowN), or its caller gone.
	{stAdmitted, present}: {{stQueued, present}, {stRefused, gone}, {stFailed, gone}},
	// Admitted as its caller was leaving: the caller gives its slot back.
	{stAdmitted, leaving}: {{stFailed, gone}},
	{stAdmitted, gone}:    nil,
	// The caller ends its wait (await, abandon).
	{stFailed, present}:  {{stFailed, gone}},
	{stFailed, leaving}:  {{stFailed, gone}},
	{stFailed, gone}:     nil,
	{stRefused, present}: {{stRefused, gone}},
	{stRefused, leaving}: nil,
	{stRefused, gone}:    nil,
}

// allowedMove reports whether the table allows the move.
func allowedMove(from, to stand) bool { return slices.Contains(moves[from], to) }
