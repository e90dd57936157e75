package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Values reads and writes plain string values (a Group's learned limits),
// each call bounded by its context's deadline as a Store's are.
type Values struct {
	s Store
}

// NewValues returns Values on c.
func NewValues(c redis.UniversalClient) *Values {
	return &Values{s: Store{rdb: c, ctxTimeouts: HonoursContext(c), ioTimeout: SocketTimeout(c)}}
}

// Get returns the value at key; ok is false when there is none.
func (v *Values) Get(ctx context.Context, key string) (val string, ok bool, err error) {
	err = v.s.bounded(ctx, func(ctx context.Context) error {
		var err error
		val, err = v.s.rdb.Get(ctx, key).Result()
		return err
	})
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	return val, err == nil, err
}

// Set sets key to val for ttl.
func (v *Values) Set(ctx context.Context, key string, val any, ttl time.Duration) error {
	return v.s.bounded(ctx, func(ctx context.Context) error {
		return v.s.rdb.Set(ctx, key, val, ttl).Err()
	})
}
