// Package impls holds the implementations the harness compares, each behind
// the one method a caller of an outbound throttler needs: Wait until a call
// may go.
package impls

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/redis/go-redis/v9"
)

// Waiter blocks until one call may proceed, or returns an error (the
// context's, or Redis's).
type Waiter interface {
	Wait(ctx context.Context) error
}

// Config is what every implementation is built from.
type Config struct {
	Key      string        // the Redis key (or key prefix) of the shared quota
	Limit    int           // calls per Interval, across all processes
	Interval time.Duration // window length
	Buffer   time.Duration // admission-to-arrival margin (throttler, seed)
	Procs    int           // number of processes sharing the quota (xrate)
}

// Names lists the implementations in the order the harness runs them.
// "throttler-ctx" is this library with the go-redis client built with
// ContextTimeoutEnabled, as its README recommends: the client then honours
// the Redis timeout itself and each round trip runs in the caller's
// goroutine. "throttler-log" is this library keeping a member per call
// whatever the limit (WithCompactFrom(0)): the sliding-window log that a
// limit of 5,000 or more would otherwise compact, to compare the two;
// "throttler-compact" is it compacting whatever the limit
// (WithCompactFrom(1)), to compare the two where the log is the default.
// "floor" is no limiter, and runs only in the keys scenario: a byte with
// a TTL under each key, named as a Group names its keys, what Redis
// charges a key of its own with a TTL before it holds anything: no layout
// that keeps a key per credential costs less. "three-commands" is no
// limiter either, and runs only in the latency scenario: the pipeline an
// unthrottled Wait sends, on a ContextTimeoutEnabled client, without the
// library (see threeCommands).
var Names = []string{"throttler", "throttler-ctx", "throttler-log", "throttler-compact", "seed", "redis_rate", "xrate", "floor", "three-commands"}

// ClientOptions adjusts the go-redis options an implementation's client is
// built with.
func ClientOptions(name string, o *redis.Options) {
	if name == "throttler-ctx" || name == "three-commands" {
		o.ContextTimeoutEnabled = true
	}
}

// New builds the implementation called name. rdb may be nil for xrate.
func New(name string, rdb *redis.Client, cfg Config) (Waiter, error) {
	if cfg.Limit < 1 || cfg.Interval <= 0 {
		return nil, fmt.Errorf("impls: limit %d / interval %s", cfg.Limit, cfg.Interval)
	}
	switch name {
	case "throttler", "throttler-ctx":
		return newThrottler(rdb, cfg)
	case "throttler-log":
		return newThrottler(rdb, cfg, throttler.WithCompactFrom(0))
	case "throttler-compact":
		return newThrottler(rdb, cfg, throttler.WithCompactFrom(1))
	case "seed":
		return newSeed(rdb, cfg), nil
	case "redis_rate":
		return newRedisRate(rdb, cfg), nil
	case "xrate":
		return newXRate(cfg), nil
	case "three-commands":
		return newThreeCommands(rdb, cfg), nil
	case "floor":
		return nil, errors.New("impls: floor is no limiter; it runs in the keys scenario only")
	}
	return nil, fmt.Errorf("impls: unknown implementation %q (have %v)", name, Names)
}

// UsesRedis reports whether an implementation talks to Redis.
func UsesRedis(name string) bool { return name != "xrate" }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
