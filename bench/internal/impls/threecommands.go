package impls

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// threeCommands is no limiter: the pipeline an unthrottled Wait of this
// library sends (ZADD of one member, ZCOUNT of its neighbourhood, ZMSCORE
// of seven members that are not calls, and a trim every thousand calls),
// timed as a Wait, so that the latency scenario shows what the protocol
// costs beside PING and what the library adds to it.
type threeCommands struct {
	rdb  *redis.Client
	key  string
	w    int64 // the window, µs
	n    atomic.Int64
	meta []string
}

func newThreeCommands(rdb *redis.Client, cfg Config) *threeCommands {
	return &threeCommands{rdb: rdb, key: cfg.Key, w: cfg.Interval.Microseconds(),
		meta: []string{"\x00m", "\x00pause", "\x00limit", "\x00limit-end", "\x00wide", "\x00wide-end", "\x00bucketed"}}
}

func (t *threeCommands) Wait(ctx context.Context) error {
	now, n := time.Now().UnixMicro(), t.n.Add(1)
	_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, t.key, redis.Z{Score: float64(now), Member: n})
		p.ZCount(ctx, t.key, "("+strconv.FormatInt(now-t.w, 10), "("+strconv.FormatInt(now+t.w, 10))
		p.ZMScore(ctx, t.key, t.meta...)
		return nil
	})
	if err == nil && n%1000 == 0 {
		err = t.rdb.ZRemRangeByScore(ctx, t.key, "0", "("+strconv.FormatInt(now-2*t.w, 10)).Err()
	}
	return err
}
