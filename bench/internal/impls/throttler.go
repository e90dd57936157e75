package impls

import (
	"context"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/redis/go-redis/v9"
)

// newThrottler is this library, as a user would set it up: one Throttler per
// process, shared by all its goroutines, with opts.
func newThrottler(rdb *redis.Client, cfg Config, opts ...throttler.Option) (Waiter, error) {
	return throttler.New(rdb, cfg.Key, cfg.Limit, cfg.Interval, append([]throttler.Option{throttler.WithBuffer(cfg.Buffer)}, opts...)...)
}

// SupportsInFlight reports whether an implementation can cap the calls in
// flight across processes. Only this library can: the peers have no such
// cap.
func SupportsInFlight(name string) bool { return name == "throttler" || name == "throttler-ctx" }

// NewInFlight is this library with WithInFlight(n) besides the rate: the
// rate's key is "{key}:rate" and the places' "{key}:inflight" (one hash
// slot). Calls go through its Do, which holds a place while fn runs.
func NewInFlight(rdb *redis.Client, cfg Config, n int, ttl time.Duration) (*throttler.Throttler, error) {
	tag := "{" + cfg.Key + "}"
	return throttler.New(rdb, tag+":rate", cfg.Limit, cfg.Interval, throttler.WithBuffer(cfg.Buffer),
		throttler.WithInFlight(tag+":inflight", n, ttl))
}

// SupportsPriority reports whether an implementation has priorities. Only
// this library has: the peers serve calls as they come.
func SupportsPriority(name string) bool { return name == "throttler" || name == "throttler-ctx" }

// NewPriority is this library with lowShare as PriorityLow's share of the
// limit (WithPriorityShare), and opts: calls carry their priority on their
// context.
func NewPriority(rdb *redis.Client, cfg Config, lowShare float64, opts ...throttler.Option) (*throttler.Throttler, error) {
	opts = append([]throttler.Option{throttler.WithBuffer(cfg.Buffer),
		throttler.WithPriorityShare(throttler.PriorityLow, lowShare)}, opts...)
	return throttler.New(rdb, cfg.Key, cfg.Limit, cfg.Interval, opts...)
}

// WaitAt waits on w as its Wait does, and returns the server time the call
// was counted at, when w knows it: for this library it takes Acquire(ctx,
// 1) (without WithInFlight, the path of Wait) and returns the permit's At;
// for the peers, which keep no such time, it calls Wait and returns the
// zero Time.
func WaitAt(ctx context.Context, w Waiter) (time.Time, error) {
	t, ok := w.(*throttler.Throttler)
	if !ok {
		return time.Time{}, w.Wait(ctx)
	}
	p, err := t.Acquire(ctx, 1)
	if err != nil {
		return time.Time{}, err
	}
	p.Done() // no place in flight to give back: a formality
	return p.At(), nil
}

// SupportsTenants reports whether an implementation serves tenants (a
// fair order within a process, a fair share across processes). Only this
// library does: the peers serve calls as they come, whoever they are for.
func SupportsTenants(name string) bool { return name == "throttler" || name == "throttler-ctx" }

// NewTenants is this library with weight as each tenant's weight
// (WithTenantWeight) when weight is not nil: calls carry their tenant on
// their context (throttler.ContextWithTenant).
func NewTenants(rdb *redis.Client, cfg Config, weight func(tenant string) float64) (*throttler.Throttler, error) {
	opts := []throttler.Option{throttler.WithBuffer(cfg.Buffer)}
	if weight != nil {
		opts = append(opts, throttler.WithTenantWeight(weight))
	}
	return throttler.New(rdb, cfg.Key, cfg.Limit, cfg.Interval, opts...)
}
