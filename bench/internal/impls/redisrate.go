package impls

import (
	"context"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// redisRate is go-redis/redis_rate (a GCRA in a Lua script), made to wait by
// polling: when a call is not allowed, sleep the RetryAfter it returns and
// ask again. Burst = limit, so a full quota may go at once.
type redisRate struct {
	l     *redis_rate.Limiter
	key   string
	limit redis_rate.Limit
}

func newRedisRate(rdb *redis.Client, cfg Config) *redisRate {
	return &redisRate{
		l:     redis_rate.NewLimiter(rdb),
		key:   cfg.Key,
		limit: redis_rate.Limit{Rate: cfg.Limit, Period: cfg.Interval, Burst: cfg.Limit},
	}
}

func (r *redisRate) Wait(ctx context.Context) error {
	for {
		res, err := r.l.Allow(ctx, r.key, r.limit)
		if err != nil {
			return err
		}
		if res.Allowed > 0 {
			return nil
		}
		if err := sleep(ctx, max(res.RetryAfter, time.Millisecond)); err != nil {
			return err
		}
	}
}
