package core

import "time"

// The margin: keeping calls to their scores at the API.
//
// The sorted set holds scores; the API sees arrivals. A call scored g goes
// at the local time the clock estimate maps g to, and the buffer stands for
// how far from g it may reach the API: if the calls reach it within a span
// of the buffer around their scores, two calls less than an interval apart
// at the API are less than interval + buffer apart in the set, where no
// window holds more than the limit. Two things move a call from its score
// besides the network: the estimate of the server's clock, off by up to
// half the round trip it came from (its error bound e, see
// ClockView.ErrBound), and a caller woken late (a loaded machine).
//
// A call never goes before its score by the estimate as it stands when it
// goes, give or take EarlyTolerance (a reply back a little sooner than the
// shortest round trip it was planned with), and at most buffer/2 - e after
// it (see the throttler's await: reached earlier, it sleeps on; later, it
// gives its slot back and reserves again). Its true departure then lies
// within [g - e - EarlyTolerance, g + buffer/2]: a late call i and an early
// call j leave within buffer/2 + ej + EarlyTolerance of their scores'
// distance, which leaves at least a quarter of the buffer to the network's
// jitter while every e stays within a quarter of the buffer. Beyond that,
// waiting for a tighter estimate could take for ever (a lopsided link stays
// lopsided), and going within buffer/2 - e would leave a call hardly any
// lateness at all, so the round claims with a margin
// X = e + max(buffer/4, slack) - buffer/2 (slack: what a call woken late
// again and again asks for): every claim of the round counts its
// neighbourhood X + P wider each way, where P is the largest margin in
// force that any replica published, its own included, and each of its
// calls may go buffer/2 + X - e late, a quarter of the buffer at least.
// Two calls i and j then leave within buffer + Xi + Xj, less a quarter of
// the buffer for the network, of their scores' distance; the last of any
// limit+1 calls to count saw the others (each added before it counted)
// within w + Xi + Xj <= w + X + P of its own, so it was refused.
//
// P must be known to every replica that counts: a round that claims with a
// margin first publishes it (redisstore.WideScript, before its members are
// added), and every round trip reads what is in force after its counts (the
// ZMSCORE that reads the pause). A round that counted with less than the
// reply says is in force admits nothing (see Resolve): either the publisher
// added its members after this round counted, and its own count saw ours,
// or the reply shows the margin. A margin stays in force for reserve-ahead,
// the longest window, six times itself and twice the buffer after it was
// last published (see WideFor): past that, no call placed with it can share
// a window with a call placed later.
//
// A margin is kept below what trims allow: members are trimmed
// TrimSlack past their window by the server's own clock, and a round
// whose estimate lags the server by e counts e + X + P further back than
// its window. A round whose spread would reach past MaxSpread claims
// nothing, takes a clock sample and tries again (hold): a Redis whose
// best round trip takes most of a second cannot keep calls to any margin
// the window can hold. Slack never holds a round: it is granted only as
// far as MaxSpread allows.
//
// What makes a trim safe is when the trimmed calls went, not their
// scores: a call goes no later than its score, buffer/2 and its margin
// (a later wake sends it back to reserve again), and a round that does not
// hold keeps X within MaxSpread/2. A call trimmed at the server's now T
// was scored before T - w - TrimSlack, so it went before
// T - interval - buffer/2 - TrimSlack + MaxSpread/2; every call a count
// after the trim admits goes after T (after the reply). With TrimSlack
// above MaxSpread/2, they leave more than an interval and buffer/2 apart
// (400ms more), however late the counting round trip reached Redis (a resend within the
// Redis timeout included). In score space, a round trip that reaches Redis
// more than TrimSlack - MaxSpread (100ms) after it was planned may count a
// neighbourhood a trim has thinned, its own trim included; a call placed
// there is late by then, and goes back.

// MaxSpread bounds e + X + P (see Spread).
const MaxSpread = TrimSlack - int64(100*time.Millisecond/time.Microsecond)

// Margin is X for a round whose clock estimate has error bound errBound
// and whose calls ask for slack (µs): zero while errBound stays within a
// quarter of the buffer and errBound + slack within half of it. A zero
// buffer promises no margin at all (calls go at their scores, as close as
// the machine lets them), and gets none.
func (c *Rules) Margin(errBound, slack int64) int64 {
	if c.Buffer <= 0 {
		return 0
	}
	b := c.Buffer.Microseconds()
	return max(0, errBound+max(b/4, slack)-b/2)
}

// Allowance is how late after its score (µs) a call counted with margin
// may go, with the estimate's error bound now errBound: negative when the
// estimate got worse since, and the call cannot be placed at all.
func (c *Rules) Allowance(margin, errBound int64) int64 {
	return c.Buffer.Microseconds()/2 + margin - errBound
}

// EarlyTolerance is how early before its score (µs) a call may go: a reply
// that came back a little sooner than the shortest round trip the round
// was planned with, which a timer for the microseconds left would only
// delay by its own latency. A millisecond, or a tenth of the buffer if
// less: within the quarter of the buffer the early side is given.
func (c *Rules) EarlyTolerance() int64 {
	return min(int64(time.Millisecond/time.Microsecond), c.Buffer.Microseconds()/10)
}

// WideFor is how long a margin X published now stays in force (µs): past
// it, no call placed with X can share a window with a call placed later.
// A call placed with X lies at most reserve-ahead, a round trip and the
// estimate's error past the publishing, each of the last two at most
// X + buffer/4 (the error that called for X); a later call that counts
// without X must be w + X + its own margin and error away from it, which
// is at most buffer/4 for a replica with none, and 2X + buffer/4 for one
// with a smaller margin of its own (a larger one covers X by itself).
func (c *Rules) WideFor(margin int64) int64 {
	return c.Ahead.Microseconds() + c.LongestW() + 6*margin + 2*c.Buffer.Microseconds()
}

// Spread is how much wider than its windows a round counts: its own margin
// and the largest in force, each way. hold reports a round that must claim
// nothing (see MaxSpread).
func Spread(errBound, margin, wide int64) (widen int64, hold bool) {
	widen = margin + max(margin, wide)
	return widen, errBound+widen > MaxSpread
}

// ErrBound is the estimate's error bound (µs): half the round trip of the
// sample it came from, and the microseconds lost converting.
func (v ClockView) ErrBound() int64 { return (v.RTT+1)/2 + ConversionSlack }

// SetMargin sets attempt a's margin (see margin.go), planned with a clock
// estimate of error bound e: its own, from e and the slack its waiters ask
// for (the most any asks), and the spread its counts reach with wide, the
// largest margin in force. A margin that ends within the
// estimate's error of now is taken to be in force still. The error alone
// may hold the round; slack never does: it is granted only as far as
// MaxSpread allows, and a call woken later than that is sent back to
// reserve again, as any late call is. A loose estimate is sampled on every
// round trip, to tighten it sooner.
func (c *Rules) SetMargin(a *Attempt, e, slack, wide int64) {
	a.Margin.Own = c.Margin(e, 0)
	if _, a.Margin.Hold = Spread(e, a.Margin.Own, wide); !a.Margin.Hold && slack > 0 {
		room := MaxSpread - e
		a.Margin.Own = max(a.Margin.Own, min(c.Margin(e, slack), room/2, room-wide))
	}
	a.Margin.Widen, _ = Spread(e, a.Margin.Own, wide)
	a.Margin.Used = max(a.Margin.Own, wide)
	a.Margin.For = c.WideFor(a.Margin.Own)
	if e > c.Buffer.Microseconds()/4 || a.Margin.Hold {
		a.Clock = true // a loose estimate, or near to needing a margin
	}
}

// marginUsed is the largest margin in force that attempt a counted with.
func (a *Attempt) marginUsed() int64 { return a.Margin.Used }

// Reach is how far each way of a checked score attempt a counts in window
// x: the window, widened by the margin (µs).
func (a *Attempt) Reach(x Window) int64 { return x.W + a.Margin.Widen }
