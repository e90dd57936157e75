package throttler

import (
	"log/slog"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// Option configures a Throttler. Options are checked by New: a bad value
// makes New return an error wrapping ErrInvalidArgument.
type Option func(*options) error

type options struct {
	buffer       time.Duration
	now          func() time.Time
	policy       FailurePolicy
	logger       *slog.Logger
	redisTimeout time.Duration
	ahead        time.Duration // WithReserveAhead, -1 = the default (see newConfig)
	maxBatch     int
	limits       limitOptions   // WithLimit, WithPacing
	observer     *Observer      // WithObserver, nil = none
	inflight     *core.InFlight // WithInFlight
	waits        waitOptions
	order        orderOptions     // WithPriorityShare, WithTenantWeight
	clockSet     bool             // WithClock
	clock        *core.Clock      // withClockSync: an estimate shared with other Throttlers
	compacted    *compactedShares // withCompactedShares: a warning shared with other Throttlers
	compact      compactOptions
}

// orderOptions say how waiting calls share the limit: each priority's
// share (WithPriorityShare), in thousandths, by level, and each tenant's
// weight (WithTenantWeight, nil: all weigh 1).
type orderOptions struct {
	shares [core.Levels]int
	weight func(tenant string) float64
	// compacted, when the first window is compacted, is called for each
	// call of a tenant, and warns once (see compactedShares).
	compacted func()
}

// waitOptions bound the waits (WithMaxWait and WithMaxQueue, 0 = none) or
// enforce none (WithShadow).
type waitOptions struct {
	maxWait  time.Duration
	maxQueue int
	shadow   bool
}

// compactOptions say which windows compact (see core.Compaction): from
// limit from on, in so many buckets, keeping so many calls as members
// whatever their age (0: no such bound). Tests lower them to compact small
// windows.
type compactOptions struct{ from, buckets, keep int }

func defaultOptions() options {
	return options{
		buffer:       50 * time.Millisecond,
		now:          time.Now,
		policy:       FailClosed(),
		logger:       slog.Default(),
		redisTimeout: time.Second,
		maxBatch:     64,
		order:        orderOptions{shares: defaultShares},
		ahead:        -1,
		compact:      compactOptions{from: core.CompactFrom, buckets: core.Buckets, keep: core.CompactKeep},
	}
}

// WithBuffer sets the margin between a call's admission and its arrival at
// the third-party API. Every admitted call holds its slot for interval plus
// the buffer, so calls that reach the API within half the buffer of their
// slots, early or late, cannot put more than limit calls into one window
// of the API. The Throttler keeps its own part of that: a call is released
// within half the buffer of its slot, less the error bound of the
// process's estimate of the server's clock (half its shortest recent round
// trip), or reserves again. While that error bound exceeds a quarter of
// the buffer (a lopsided or slow link to Redis, a process just started on
// a busy machine), or calls keep being woken late, the Throttler counts
// with a margin instead: its calls' neighbourhoods are counted wider by
// the excess, on every replica (see Stats.Redis.Margin), which costs that much
// of the window's capacity while it lasts and keeps the promise. Default
// 50ms. Zero is allowed (no margin is kept: calls go at their slots as
// closely as the machine lets them); negative is an error, and so is, for
// New, a buffer longer than both ten times its interval and a minute.
func WithBuffer(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return invalidf("WithBuffer(%s): buffer must not be negative", d)
		}
		o.buffer = d
		return nil
	}
}

// WithClock sets the local clock, for tests and simulations. Window
// arithmetic uses the Redis server's clock; the local clock only converts
// server times into local sleeps, so a skewed local clock does not change
// what is admitted; FallbackLocal's local share counts real time (the
// runtime's monotonic clock), so a step of the local clock does not change
// it either. Default time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) error {
		if now == nil {
			return invalidf("WithClock(nil)")
		}
		o.now, o.clockSet = now, true
		return nil
	}
}

// withClockSync makes the Throttler share c, its Group's estimate of the
// server's clock, with the Group's other Throttlers, unless WithClock gives
// it a clock of its own: they reach one server, and each one's round trips
// sharpen the estimate for all, so a new Throttler takes no round trip of
// its own to read the clock first.
func withClockSync(c *core.Clock) Option {
	return func(o *options) error {
		o.clock = c
		return nil
	}
}

// clockSync returns the Throttler's estimate of the server's clock: the
// one shared by withClockSync, or a new one.
func (o *options) clockSync() *core.Clock {
	if o.clock != nil && !o.clockSet {
		return o.clock
	}
	c := core.NewClock(o.now())
	return &c
}

// WithFailurePolicy sets what calls do when Redis fails (an error or a
// timeout). Default FailClosed().
func WithFailurePolicy(p FailurePolicy) Option {
	return func(o *options) error {
		if err := p.validate(); err != nil {
			return err
		}
		o.policy = p
		return nil
	}
}

// WithLogger sets where Redis failures and fallback changes are logged,
// and the warnings, each given once, that calls keep getting their
// connections later than their slots allow (see Transport) and that calls
// of tenants meet a compacted window, where their shares cannot hold (see
// ContextWithTenant; a Group warns once for all its Throttlers). Default
// slog.Default().
// Errors are logged at most once per second.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return invalidf("WithLogger(nil)")
		}
		o.logger = l
		return nil
	}
}

// WithRedisTimeout bounds each Redis round trip the Throttler makes (Usage's
// two share one bound; Pub/Sub subscriptions have none); one that times out
// is a Redis failure (see WithFailurePolicy). Default 1s; d must be
// positive. A reservation round trip that fails within it on its
// connection (reset, closed, refused, a socket timeout of the client's) or
// on a server state that passes (LOADING, READONLY, MASTERDOWN, TRYAGAIN,
// CLUSTERDOWN) is sent again on another connection while the bound leaves
// time, after pauses of none, then 2ms, doubling up to 64ms
// (Stats.Redis.RoundsRetried counts them): a blip of the network costs its
// calls a delay, not an error. A round trip sent again may have been
// applied already: each of its writes is safe to apply twice, and its
// counts may then refuse a call the first would have admitted, never
// admit one it refused (docs/design.md, "A blip is not an outage"). A round trip that gives a slot back (a call refused, abandoned
// or settled for less) is bounded by the shorter of d and 250ms.
//
// With ContextTimeoutEnabled, or a *redis.Client whose ReadTimeout and
// WriteTimeout are both set and at most the bound (within 2ms), the round
// trip runs in the calling goroutine and ends by its deadline, give or take
// one socket write and read at those timeouts. With any other client it
// runs in a helper goroutine, which the Throttler stops waiting for at the
// deadline, leaving the call to end at the client's own timeouts.
func WithRedisTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return invalidf("WithRedisTimeout(%s): timeout must be positive", d)
		}
		o.redisTimeout = d
		return nil
	}
}

// maxReserveAhead caps WithReserveAhead.
const maxReserveAhead = 10 * time.Minute

// WithReserveAhead sets how far into the future a waiting call may hold a
// slot. A waiter given a future slot sleeps once, locally, instead of polling
// Redis. A process killed while holding future slots loses them until each
// slot's time plus interval plus buffer, so this also bounds what a crash
// costs. Default: the interval, capped at one second. Zero means a slot is
// reserved only once it is free now; at most 10 minutes.
func WithReserveAhead(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > maxReserveAhead {
			return invalidf("WithReserveAhead(%s): must be within 0..%s", d, maxReserveAhead)
		}
		o.ahead = d
		return nil
	}
}
