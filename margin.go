package throttler

import (
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// The margin that keeps calls to their scores at the API is the core's
// arithmetic (see core.Rules.Margin and the account in internal/core's
// margin.go); what follows is the Throttler's side: the margin in force
// that replicas publish, and how far from its score a call would go.

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

// offScore tells how far from its score the admitted res would go now,
// by clock's estimate as it stands now (see internal/core's margin.go):
// the local time to go instead when it is early (in the future), and how
// late it is (positive) when later than its allowance, including when the
// estimate got so much worse since that the call cannot be placed within
// its margin at all. A call admitted without Redis, or with a zero
// buffer, is never early or late.
func (c *config) offScore(res reservation, clock *core.Clock) (target time.Time, late time.Duration) {
	if res.score == 0 || c.rules.Buffer <= 0 {
		return time.Time{}, 0
	}
	view := clock.View()
	allow := c.rules.Allowance(res.margin, view.ErrBound())
	target = view.Local(res.score)
	now := c.now()
	off := now.Sub(target).Microseconds() // > 0: late
	if clock.Anchored() {
		// A local clock stepped back since the last sample has the call
		// wait the step out and then look on time: by the runtime's
		// clock, which never steps, it is late (seed 53917: a call
		// admitted for 339ms went at 746ms, after a step back of 407ms,
		// and made 14 in a window of 12 at the API).
		off = max(off, clock.ServerByRuntime(time.Now(), now)-res.score)
	}
	switch {
	case allow < 0:
		return time.Time{}, time.Duration(abs64(off)-allow) * time.Microsecond
	case off < -c.rules.EarlyTolerance():
		return target, 0
	case off > allow:
		return time.Time{}, time.Duration(off) * time.Microsecond
	}
	return time.Time{}, 0
}

// marginRider publishes the margin a round counts with and learns the
// largest in force (see core.Rules.SetMargin).
type marginRider struct{ noRider }

func (marginRider) ask(t *Throttler, a *core.Attempt, in *core.PlanIn) {
	e := in.Clock.ErrBound()
	t.rules.SetMargin(a, e, t.worker.slack(), t.shared.wideAt(in.Clock.Server(in.Now)-e))
	in.Widen, in.Hold = a.Margin.Widen, a.Margin.Hold
}

// read learns the margin the reply read, and the largest in force as it
// arrives.
func (marginRider) read(t *Throttler, rd *round, rr *replyRead) {
	r := rd.Reply
	t.shared.learnWide(r.Wide, r.WideEnd)
	if r.WideEnd > rr.arrived-rr.errBound {
		rr.wide = r.Wide
	}
}

// holds: a round must be sent to keep its margin published.
func (marginRider) holds(a *core.Attempt) bool { return a.Margin.Hold }

// marginWiden is how much wider than each window attempt a counts.
func marginWiden(a *core.Attempt) int64 { return a.Margin.Widen }

// ownMargin is the margin attempt a's claims were counted with.
func ownMargin(a *core.Attempt) int64 { return a.Margin.Own }
