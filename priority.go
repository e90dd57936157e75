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
// of any priority. Calls of tenants are served in a fair order within
// each priority, and a tenant held to its share waits for the room it
// leaves whatever the priority (see ContextWithTenant). When
// WithMaxQueue's bound is reached, the lowest priority is shed first.
type Priority int8

// The priorities, highest first. The zero value is PriorityNormal.
const (
	PriorityHigh   Priority = 1
	PriorityNormal Priority = 0
	PriorityLow    Priority = -1
)

func (p Priority) level() core.Level { return core.Level(p - PriorityLow) }

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
		o.order.shares[p.level()] = int(share*1000 + 0.5)
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

// checkN reports an n beyond what one call of priority p may take under
// the configured limits.
func (c *config) checkN(where string, n int, p Priority) error {
	most := c.rules.CapUnder(c.rules.MinLimit, p.level())
	if n < 1 || n > most {
		return invalidf("%s(%d): n must be in 1..%d at priority %s", where, n, most, p)
	}
	return nil
}
