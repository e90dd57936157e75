package impls

import (
	"github.com/go-throttler/throttler"
	"github.com/redis/go-redis/v9"
)

// newThrottler is this library, as a user would set it up: one Throttler per
// process, shared by all its goroutines.
func newThrottler(rdb *redis.Client, cfg Config) (Waiter, error) {
	return throttler.New(rdb, cfg.Key, cfg.Limit, cfg.Interval, throttler.WithBuffer(cfg.Buffer))
}
