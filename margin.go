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
	off := c.now().Sub(target).Microseconds() // > 0: late
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
