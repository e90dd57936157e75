package throttlergrpc

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-throttler/throttler"
)

// Option configures an interceptor. A bad Option does not panic: the
// interceptor it was given to fails every call, unsent, with an error
// wrapping throttler.ErrInvalidArgument whose gRPC code is
// InvalidArgument, naming the Option.
type Option func(*config) error

// config is what the Options set.
type config struct {
	retries    int
	maxPause   time.Duration
	backoff    time.Duration // 0: Throttler.BackOff's default
	limitKey   string        // WithLimitMetadata; "" = none
	limitFor   time.Duration
	quotaValue bool // WithQuotaFailureLimit
	actual     func(ctx context.Context, method string, reply any) (int, bool)
}

func defaultConfig() config {
	return config{maxPause: throttler.DefaultMaxPause, limitFor: time.Hour}
}

// WithRetries sets how many times a call the API refused is made again:
// a unary call answered RESOURCE_EXHAUSTED (with or without RetryInfo), or
// UNAVAILABLE with RetryInfo or a positive pushback, unless a
// grpc-retry-pushback-ms trailer said not to retry; and a stream whose
// creation was refused so
// (nothing of it was sent). Each attempt waits on the Throttler anew, so
// it goes once the pause (or back-off) the refusal set for every replica
// is over and the quota admits it. No other error is retried, nor a call
// whose context has ended; a retry whose wait cannot finish (its context
// ends, or the pause outlasts its deadline, which the wait sees at once)
// is not made, and the call returns the last refusal. n must not be
// negative. Default 0: a refusal is returned as it came, after it paused
// every replica.
func WithRetries(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return invalidf("WithRetries(%d): n must not be negative", n)
		}
		c.retries = n
		return nil
	}
}

// WithMaxPause caps how long one refusal pauses every replica: a
// RetryInfo's delay, and a back-off (see WithBackoff). d must be
// positive. Default throttler.DefaultMaxPause (15 minutes).
func WithMaxPause(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalidf("WithMaxPause(%s): d must be positive", d)
		}
		c.maxPause = d
		return nil
	}
}

// WithBackoff sets how long a RESOURCE_EXHAUSTED without RetryInfo or a
// positive pushback, which does not say until when, pauses every replica at first: doubled each
// time the API refuses again within a back-off's length after the last
// one ended, whichever replica reads it, at most WithMaxPause (see
// throttler.Throttler.BackOff). d must be positive. Default 1 second.
func WithBackoff(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalidf("WithBackoff(%s): d must be positive", d)
		}
		c.backoff = d
		return nil
	}
}

// WithLimitMetadata names the metadata entry in which the API states how
// many calls it allows per interval, where the interval is the
// Throttler's first (New's): the entry key of a response's header or
// trailer metadata (its first value, a decimal integer), and of a
// refusal's google.rpc.ErrorInfo metadata, where Google's APIs state
// "quota_limit_value". When a call's response or refusal states less
// than the Throttler's limit, every replica lowers the limit to it for
// WithLimitFor (see throttler.Throttler.LowerLimit), written again while
// responses keep saying so past half that time; when one states at least
// the Throttler's limit, a lowering in force ends. Several values on one
// response (header, trailer, ErrorInfo, and WithQuotaFailureLimit's): the
// least counts. A value of 0 or one that is no integer is ignored. key is
// matched without regard to case in metadata (which gRPC lowercases), and
// as given in ErrorInfo. Default none.
//
// Reading a header costs the call two CallOptions (grpc.Header and
// grpc.Trailer, beside any of the caller's); a value that changes
// nothing costs no Redis round trip.
func WithLimitMetadata(key string) Option {
	return func(c *config) error {
		if strings.TrimSpace(key) == "" {
			return invalidf("WithLimitMetadata(%q): empty key", key)
		}
		c.limitKey = key
		return nil
	}
}

// WithLimitFor sets how long a limit read from the API (WithLimitMetadata,
// WithQuotaFailureLimit) holds on every replica once written. d must be
// positive. Default 1 hour.
func WithLimitFor(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalidf("WithLimitFor(%s): d must be positive", d)
		}
		c.limitFor = d
		return nil
	}
}

// WithQuotaFailureLimit reads the quota a refusal states in its
// google.rpc.QuotaFailure detail: the least positive quota_value (or
// future_quota_value, a value being rolled out) among its violations is
// taken as the API's limit per the Throttler's first interval, and
// followed as WithLimitMetadata's are. Use it only when the violated
// quota is the one the Throttler enforces, over the same interval: a
// per-day quota's value read as a per-minute limit would starve every
// replica for WithLimitFor. Default off: a QuotaFailure lowers nothing.
func WithQuotaFailureLimit() Option {
	return func(c *config) error {
		c.quotaValue = true
		return nil
	}
}

// WithActualCost settles each successful unary call at what it cost,
// known from its reply, as an LLM API's tokens are: the call waits for
// its estimate (the cost its context carries, see throttler.ContextWithCost,
// or 1), and once it succeeds actual tells what it cost, in the
// Throttler's units; the surplus goes back to every replica at once, an
// excess counts as debt (see throttler.Permit.Settle). actual returns ok
// false (or a negative cost) to keep the estimate. It is not asked of a
// failed call, nor of a stream, whose estimate stands; but with it set,
// every refused call, a stream's too, is settled at 0 (see
// UnaryClientInterceptor). actual must not be nil, and must be quick: it
// runs on the caller's goroutine before the call returns.
func WithActualCost(actual func(ctx context.Context, method string, reply any) (cost int, ok bool)) Option {
	return func(c *config) error {
		if actual == nil {
			return invalidf("WithActualCost: actual is nil")
		}
		c.actual = actual
		return nil
	}
}

// newConfig applies opts to the defaults; the first bad Option's error
// is returned, for the interceptor to fail every call with.
func newConfig(opts []Option) (config, error) {
	c := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return c, invalidf("Option %d is nil", i)
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// invalidf is an error wrapping throttler.ErrInvalidArgument.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: throttlergrpc: "+format, append([]any{throttler.ErrInvalidArgument}, args...)...)
}
