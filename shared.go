package throttler

import (
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// sharedState is what every process on the key agrees on through members
// of the first limit's key that are not calls (see limits.go): a shared
// pause and a lowered first limit, as this process last learned or set
// them. Guarded by the Throttler's mu.
type sharedState struct {
	pausedTill int64 // server µs: no call goes before it (a shared pause); 0 = none
	lowered    int   // the first limit as lowered through Redis (LowerLimit); 0 = not lowered
	lowerTill  int64 // server µs at which the lowering ends
	limitGen   int   // the limit generation: grows each time the limit is lowered: reservations made before must be made again
	// The largest margin any replica published (µs) and when it ends
	// (server µs): see margin.go.
	wide, wideTill int64
	// A first limit above New's that the key states, in force when the
	// last round trip read it (0 = none): another process's Throttler was
	// made with it (see Group.Learn). Written under mu, read without it.
	above atomic.Int64
}

// pauseTo extends the pause to end (server µs), tells m when it did (c
// gives the end's local time), and reports whether it did: pauses only
// extend.
func (s *sharedState) pauseTo(end int64, c *core.Clock, m *meter) bool {
	if end <= s.pausedTill {
		return false
	}
	s.pausedTill = end
	m.paused(c.Local(end))
	return true
}

// paused reports whether the pause covers server time at.
func (s *sharedState) paused(at int64) bool { return at < s.pausedTill }

// limits returns the limits in force at serverNow, one per window of wins,
// appended to buf[:0].
func (s *sharedState) limits(wins []core.Window, serverNow int64, buf []int) []int {
	buf = buf[:0]
	for _, x := range wins {
		buf = append(buf, x.Limit)
	}
	if s.lowered > 0 && serverNow < s.lowerTill {
		buf[0] = min(buf[0], s.lowered)
	}
	return buf
}

// lowerTo records the first limit lowered to n (0 = not lowered) until
// till, where configured is New's, and tells m when the limit in force
// changed. When it is lower, a new limit generation makes calls holding
// slots reserved under the higher limit reserve again.
func (s *sharedState) lowerTo(n int, till int64, configured int, m *meter) {
	before, after := configured, configured
	if s.lowered > 0 {
		before = s.lowered
	}
	if n > 0 {
		after = n
	}
	if after < before {
		s.limitGen++
	}
	s.lowered, s.lowerTill = n, till
	if after != before {
		m.limitChanged(after)
	}
}

// learnLimit takes the first limit as the key states it (limit until end;
// 0 = none stated), where configured is New's: one below configured is a
// lowering (see lowerTo). It reports whether that changed what s holds.
func (s *sharedState) learnLimit(limit, end int64, configured int, m *meter) bool {
	lowered, till := 0, int64(0)
	if limit > 0 && end > 0 && limit < int64(configured) {
		lowered, till = int(limit), end
	}
	if lowered == s.lowered && till == s.lowerTill {
		return false
	}
	s.lowerTo(lowered, till, configured, m)
	return true
}

// learnMeta takes the pause and the first limit a round trip read (r) at
// serverNow, where configured is New's first limit: a limit above it, in
// force, is kept in above.
func (s *sharedState) learnMeta(r core.Reply, configured int, serverNow int64, c *core.Clock, m *meter) {
	s.pauseTo(r.Pause, c, m)
	s.learnLimit(r.Limit, r.LimitEnd, configured, m)
	above := int64(0)
	if r.Limit > int64(configured) && r.LimitEnd > serverNow {
		above = r.Limit
	}
	s.above.Store(above)
}

// after returns now, or the end of the pause known to be in force: a pause
// learned before Redis failed still holds.
func (s *sharedState) after(now time.Time, c *core.Clock) time.Time {
	if s.pausedTill > c.Server(now) {
		return c.Local(s.pausedTill)
	}
	return now
}

// loweredAt reports whether a lowering of the first limit is in force at
// serverNow (µs).
func (s *sharedState) loweredAt(serverNow int64) bool {
	return s.lowered > 0 && serverNow < s.lowerTill
}
