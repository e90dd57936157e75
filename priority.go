package throttler

import (
	"context"
	"fmt"

	"github.com/go-throttler/throttler/internal/core"
)

// Priority orders calls when the quota runs short. A call's priority
// comes from its context (see ContextWithPriority), so that Wait, Do, Wrap
// and the Transport all carry it. Within one process, waiting calls are
// served by priority, then in the order they called, except that a call
// whose claim a round trip did not admit, or that waited for a place in
// flight (WithInFlight), goes back to the head of the queue, ahead of calls
// of any priority. When WithMaxQueue's bound is reached, the lowest
// priority is shed first.
type Priority int8

// The priorities, highest first. The zero value is PriorityNormal.
const (
	PriorityHigh   Priority = 1
	PriorityNormal Priority = 0
	PriorityLow    Priority = -1
)

func (p Priority) level() int { return int(p - PriorityLow) }

func (p Priority) valid() bool { return p >= PriorityLow && p <= PriorityHigh }

// String returns "high", "normal" or "low".
func (p Priority) String() string {
	switch p {
	case PriorityHigh:
		return "high"
	case PriorityNormal:
		return "normal"
	case PriorityLow:
		return "low"
	}
	return fmt.Sprintf("Priority(%d)", int8(p))
}

type priorityKey struct{}

// ContextWithPriority returns a copy of ctx that carries p: calls made with
// it (Wait, Do, Wrap, requests through a Transport) wait at priority p. A
// value outside PriorityLow..PriorityHigh is clamped to that range.
func ContextWithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, min(max(p, PriorityLow), PriorityHigh))
}

// PriorityFromContext returns the priority ctx carries: PriorityNormal
// unless ContextWithPriority set one.
func PriorityFromContext(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}

// WithPriorityShare sets the share of every limit that calls of priority p
// may fill: such a call is admitted only while each window holding it, with
// it, holds at most share × the limit (rounded down, at least one call), so
// that calls of higher priorities always find the rest free, on every
// replica. Such calls reserve slots at most (1 - share) x interval ahead
// (and no further than WithReserveAhead allows): a reservation ahead counts
// against every call of a higher priority near it. Calls of a priority whose share
// is 1 may fill the whole limit.
// Default: 1 for PriorityHigh and PriorityNormal, 0.9 for PriorityLow.
// share must be in (0, 1], and the shares must not grow from PriorityHigh
// down to PriorityLow (New checks). Every Throttler on the key should use
// the same shares: they are checked by each process for its own calls.
func WithPriorityShare(p Priority, share float64) Option {
	return func(o *options) error {
		if !p.valid() {
			return invalidf("WithPriorityShare(%s, %g): no such priority", p, share)
		}
		if !(share > 0 && share <= 1) {
			return invalidf("WithPriorityShare(%s, %g): share must be in (0, 1]", p, share)
		}
		o.shares[p.level()] = int(share*1000 + 0.5)
		return nil
	}
}

// defaultShares are WithPriorityShare's defaults, in thousandths, by level.
var defaultShares = [core.Levels]int{900, 1000, 1000}

// checkShares reports shares that grow toward the lower priorities.
func checkShares(s [core.Levels]int) error {
	for l := 1; l < core.Levels; l++ {
		if s[l] < s[l-1] {
			return invalidf("WithPriorityShare: priority %s has a smaller share (%d/1000) than %s (%d/1000)",
				Priority(l)+PriorityLow, s[l], Priority(l-1)+PriorityLow, s[l-1])
		}
	}
	return nil
}

// levelCaps is, by level, the most calls a window holding a call of that
// priority may hold with it.
type levelCaps [core.Levels]int

// caps returns each priority's cap under the limit lim.
func (c *config) caps(lim int) levelCaps {
	var out levelCaps
	for l, share := range c.opt.shares {
		out[l] = max(1, lim*share/1000)
	}
	return out
}

// capUnder is the most units one call of priority p may take while the
// tightest limit in force is lowest: a priority's cap only grows with the
// limit, so the tightest limit's cap is the least of them all.
func (c *config) capUnder(lowest int, p Priority) int {
	return c.caps(lowest)[p.level()]
}

// checkN reports an n beyond what one call of priority p may take under
// the configured limits.
func (c *config) checkN(where string, n int, p Priority) error {
	most := c.capUnder(c.minLimit, p)
	if n < 1 || n > most {
		return invalidf("%s(%d): n must be in 1..%d at priority %s", where, n, most, p)
	}
	return nil
}

// capped reports whether calls of priority p may fill less than the whole
// limit: the free slots under the limit are not theirs.
func (c *config) capped(p Priority) bool {
	return c.opt.shares[p.level()] < 1000
}

// smallestCap is the smallest cap under lim of the priorities in mask (a bit
// per level) and of the highest priority.
func (c *config) smallestCap(mask uint8, lim int) int {
	caps := c.caps(lim)
	low := caps[PriorityHigh.level()]
	for l, cp := range caps {
		if mask&(1<<l) != 0 {
			low = min(low, cp)
		}
	}
	return low
}

// lowCaps returns, for a round trip learning k free slots (none when k is
// 0), for each priority in mask (a bit per level) that may fill less than
// the whole limit, its cap under each limit in lims: the round trip learns
// its free slots too. The slices of buf are reused.
func (c *config) lowCaps(mask uint8, k int, lims []int, buf [core.Levels][]int) [core.Levels][]int {
	for l := range core.Levels {
		buf[l] = buf[l][:0]
		if k == 0 || mask&(1<<l) == 0 || !c.capped(Priority(l)+PriorityLow) {
			continue
		}
		for _, lim := range lims {
			buf[l] = append(buf[l], c.caps(lim)[l])
		}
	}
	return buf
}

// cappedAhead is how far ahead (µs) a call of a priority held to a share of
// the limit may reserve a slot: at most the time the first limit's
// interval takes to pass through the room the share leaves to the higher
// priorities ((1 - share) x interval), and at most WithReserveAhead's.
func (c *config) cappedAhead(p Priority) int64 {
	left := int64(1000 - c.opt.shares[p.level()])
	return min(c.opt.ahead.Microseconds(), c.wins[0].Interval.Microseconds()*left/1000)
}
