package throttler

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Learned limits: an API may tell each credential's limit only in its
// answers (a header stating the limit, a plan read from another API). The
// limits function gives what is known beforehand; Learn records what was
// learned in Redis, next to the key's window, where every replica's Group
// reads it when it makes the key's Throttler.

// learnedSuffix follows a key's first Redis key in the key holding its
// learned limit.
const learnedSuffix = ":learned"

// learnedTimeout bounds the read of a learned limit.
const learnedTimeout = time.Second

// WithLearnedLimits makes For read, from Redis, the first limit recorded
// for a key by Learn (in any replica), when it makes the key's Throttler:
// that limit then replaces the Quota's Limit (the interval and the rest
// stay the limits function's). The read is one GET, within a second; when
// it fails, For uses the limits function's Limit and logs the failure.
// Without this option Learn is refused, and For reads nothing.
func WithLearnedLimits() GroupOption {
	return func(o *groupOptions) error {
		o.learned = true
		return nil
	}
}

// Learn records in Redis that key's first limit is limit calls per the
// interval its Quota states, for ttl: until then every replica's Group
// (made WithLearnedLimits) makes key's Throttler with it, in place of the
// Quota's Limit. A Throttler already made keeps the limit it was made
// with, but Learn also sets the key's shared limit through it (see
// Throttler.SetLimit) for ttl: a lower limit holds at once for every
// replica's Throttler on the key, up to each one's own limit; an equal or
// higher one ends a lowering in force. A higher limit reaches the
// Throttlers already made only once they are evicted and made anew; this
// process's is evicted at once when it is idle.
//
// Learn makes key's Throttler first when the Group holds none (see For),
// and takes two Redis round trips, each bounded as a Throttler's are. It
// returns an error wrapping ErrInvalidArgument when the Group was made
// without WithLearnedLimits, key is empty, limit is below 1 or ttl is not
// positive; For's errors; and one wrapping ErrRedis when Redis fails (a
// limit not recorded is not set either).
func (g *Group) Learn(ctx context.Context, key string, limit int, ttl time.Duration) error {
	switch {
	case !g.opt.learned:
		return invalidf("Group.Learn: the Group was made without WithLearnedLimits")
	case key == "":
		return invalidf("Group.Learn: empty key")
	case limit < 1 || ttl <= 0:
		return invalidf("Group.Learn(%d, %s): limit must be at least 1 and ttl positive", limit, ttl)
	}
	// The Throttler is made first, with what was known before: through it
	// a lower limit reaches every replica's.
	t, err := g.For(key)
	if err != nil {
		return err
	}
	set := func(ctx context.Context) error {
		return g.client.Set(ctx, t.Key()+learnedSuffix, limit, ttl).Err()
	}
	rctx, cancel := context.WithTimeout(ctx, learnedTimeout)
	defer cancel()
	if err := g.rs.bounded(rctx, set); err != nil {
		return redisError(err)
	}
	if err := t.SetLimit(ctx, limit, ttl); err != nil {
		return err
	}
	if limit > t.Limit() {
		g.evictIdle(idOf(key), t)
	}
	return nil
}

// learnedLimit reads the limit recorded for the key whose first Redis key
// is base, if any.
func (g *Group) learnedLimit(base string) (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), learnedTimeout)
	defer cancel()
	var v string
	err := g.rs.bounded(ctx, func(ctx context.Context) error {
		var err error
		v, err = g.client.Get(ctx, base+learnedSuffix).Result()
		return err
	})
	if errors.Is(err, redis.Nil) {
		return 0, false
	}
	if err != nil {
		g.logOnce("throttler: learned limit not read; the limits function's is used",
			slog.String("key", base), slog.Any("err", err))
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		g.logOnce("throttler: learned limit unreadable; the limits function's is used",
			slog.String("key", base))
		return 0, false
	}
	return n, true
}

// evictIdle evicts t, when it is still the Group's for id and idle.
func (g *Group) evictIdle(id keyID, t *Throttler) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.byID[id]; e != nil && e.t == t {
		if idle, _ := t.dormant(); idle {
			g.removeLocked(e)
		}
	}
}

// logOnce logs at most once a second.
func (g *Group) logOnce(msg string, attrs ...any) {
	now := time.Now().UnixNano()
	last := g.logged.Load()
	if now-last < int64(time.Second) || !g.logged.CompareAndSwap(last, now) {
		return
	}
	g.opt.logger.Warn(msg, attrs...)
}
