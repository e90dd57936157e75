package throttler

import (
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// The margin: keeping calls to their scores at the API.
//
// The sorted set holds scores; the API sees arrivals. A call scored g goes
// at the local time the clock estimate maps g to, and the buffer stands for
// how far from g it may reach the API: if the calls reach it within a span
// of the buffer around their scores, two calls less than an interval apart
// at the API are less than interval + buffer apart in the set, where no
// window holds more than the limit. Two things move a call from its score
// besides the network: the estimate of the server's clock, off by up to
// half the round trip it came from (its error bound e, see clockSync), and
// a caller woken late (a loaded machine).
//
// A call never goes before its score by the estimate as it stands when it
// goes, give or take earlyTolerance (a reply back a little sooner than the
// shortest round trip it was planned with), and at most buffer/2 - e after
// it (see await: reached earlier, it sleeps on; later, it gives its slot
// back and reserves again). Its true departure then lies within
// [g - e - earlyTolerance, g + buffer/2]: a late call i and an early call j
// leave within buffer/2 + ej + earlyTolerance of their scores' distance,
// which leaves at least a quarter of the buffer to the network's jitter
// while every e stays within a quarter of the buffer. Beyond that, waiting
// for a tighter estimate could take for ever (a lopsided link stays
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
// reply says is in force admits nothing (see resolve): either the publisher
// added its members after this round counted, and its own count saw ours,
// or the reply shows the margin. A margin stays in force for reserve-ahead,
// the longest window, six times itself and twice the buffer after it was
// last published (see wideFor): past that, no call placed with it can share
// a window with a call placed later.
//
// A margin is kept below what trims allow: members are trimmed
// core.TrimSlack past their window by the server's own clock, and a round
// whose estimate lags the server by e counts e + X + P further back than
// that. A round whose margin would reach past maxSpread claims nothing,
// takes a clock sample and tries again (hold): a Redis whose best round
// trip takes most of a second cannot keep calls to any margin the window
// can hold. Slack never holds a round: it is granted only as far as
// maxSpread allows.

// maxSpread bounds e + X + P (see hold).
const maxSpread = core.TrimSlack - int64(100*time.Millisecond/time.Microsecond)

// margin is X for a round whose clock estimate has error bound errBound
// and whose calls ask for slack (µs): zero while errBound stays within a
// quarter of the buffer and errBound + slack within half of it. A zero
// buffer promises no margin at all (calls go at their scores, as close as
// the machine lets them), and gets none.
func (c *config) margin(errBound, slack int64) int64 {
	if c.opt.buffer <= 0 {
		return 0
	}
	b := c.opt.buffer.Microseconds()
	return max(0, errBound+max(b/4, slack)-b/2)
}

// allowance is how late after its score (µs) a call counted with margin
// may go, with the estimate's error bound now errBound: negative when the
// estimate got worse since, and the call cannot be placed at all.
func (c *config) allowance(margin, errBound int64) int64 {
	return c.opt.buffer.Microseconds()/2 + margin - errBound
}

// earlyTolerance is how early before its score (µs) a call may go: a reply
// that came back a little sooner than the shortest round trip the round
// was planned with, which a timer for the microseconds left would only
// delay by its own latency. A millisecond, or a tenth of the buffer if
// less: within the quarter of the buffer the early side is given.
func (c *config) earlyTolerance() int64 {
	return min(int64(time.Millisecond/time.Microsecond), c.opt.buffer.Microseconds()/10)
}

// wideFor is how long a margin X published now stays in force (µs): past
// it, no call placed with X can share a window with a call placed later.
// A call placed with X lies at most reserve-ahead, a round trip and the
// estimate's error past the publishing, each of the last two at most
// X + buffer/4 (the error that called for X); a later call that counts
// without X must be w + X + its own margin and error away from it, which
// is at most buffer/4 for a replica with none, and 2X + buffer/4 for one
// with a smaller margin of its own (a larger one covers X by itself).
func (c *config) wideFor(margin int64) int64 {
	return c.opt.ahead.Microseconds() + c.longestW() + 6*margin + 2*c.opt.buffer.Microseconds()
}

// spread is how much wider than its windows a round counts: its own margin
// and the largest in force, each way. hold reports a round that must claim
// nothing (see maxSpread).
func spread(errBound, margin, wide int64) (widen int64, hold bool) {
	widen = margin + max(margin, wide)
	return widen, errBound+widen > maxSpread
}

// errBound is the estimate's error bound (µs): half the round trip of the
// sample it came from, and the microseconds lost converting.
func (v clockView) errBound() int64 { return (v.rtt+1)/2 + conversionSlack }

// wideAt is the largest margin in force at serverNow (µs), as last learned.
func (s *sharedState) wideAt(serverNow int64) int64 {
	if s.wideTill > serverNow {
		return s.wide
	}
	return 0
}

// learnWide takes a margin read from Redis: the read with the later end is
// the newer (ends only grow while a margin is in force, and a new margin
// ends after the one it replaced).
func (s *sharedState) learnWide(wide, end int64) {
	if end >= s.wideTill {
		s.wide, s.wideTill = wide, end
	}
}

// setMargin sets attempt a's margin (see margin.go), planned with a clock
// estimate of error bound e: its own, from e and the slack its waiters ask
// for (the most any asks), and the spread its counts reach with wide, the
// largest margin in force. A margin that ends within the
// estimate's error of now is taken to be in force still. The error alone
// may hold the round; slack never does: it is granted only as far as
// maxSpread allows, and a call woken later than that is sent back to
// reserve again, as any late call is. A loose estimate is sampled on every
// round trip, to tighten it sooner.
func (c *config) setMargin(a *core.Attempt, e, slack, wide int64) {
	a.Margin.Own = c.margin(e, 0)
	if _, a.Margin.Hold = spread(e, a.Margin.Own, wide); !a.Margin.Hold && slack > 0 {
		room := maxSpread - e
		a.Margin.Own = max(a.Margin.Own, min(c.margin(e, slack), room/2, room-wide))
	}
	a.Margin.Widen, _ = spread(e, a.Margin.Own, wide)
	a.Margin.Used = max(a.Margin.Own, wide)
	a.Margin.For = c.wideFor(a.Margin.Own)
	if e > c.opt.buffer.Microseconds()/4 || a.Margin.Hold {
		a.Clock = true // a loose estimate, or near to needing a margin
	}
}

// offScore tells how far from its score the admitted res would go now,
// by clock's estimate as it stands now (see margin.go): the local
// time to go instead when it is early (in the future), and how late it is
// (positive) when later than its allowance, including when the estimate
// got so much worse since that the call cannot be placed within its margin
// at all. A call admitted without Redis, or with a zero buffer, is never
// early or late.
func (c *config) offScore(res reservation, clock *clockSync) (target time.Time, late time.Duration) {
	if res.score == 0 || c.opt.buffer <= 0 {
		return time.Time{}, 0
	}
	view := clock.view()
	allow := c.allowance(res.margin, view.errBound())
	target = view.local(res.score)
	off := c.now().Sub(target).Microseconds() // > 0: late
	switch {
	case allow < 0:
		return time.Time{}, time.Duration(abs64(off)-allow) * time.Microsecond
	case off < -c.earlyTolerance():
		return target, 0
	case off > allow:
		return time.Time{}, time.Duration(off) * time.Microsecond
	}
	return time.Time{}, 0
}
