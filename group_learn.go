package throttler

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/go-throttler/throttler/internal/core"
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
// that limit then replaces the KeyQuota's Limit (the interval and the rest
// stay the limits function's). The read is one GET, within a second; when
// it fails, For uses the limits function's Limit and logs the failure.
// For also makes a key's Throttler anew when the key states a higher
// limit than the Throttler's (see Learn). Without this option Learn is
// refused, and For reads nothing.
func WithLearnedLimits() GroupOption {
	return func(o *groupOptions) error {
		o.learned = true
		return nil
	}
}

// Learn records in Redis that key's first limit is limit calls per the
// interval its KeyQuota states, for every replica:
//
//   - every replica's Group (made WithLearnedLimits) makes key's Throttler
//     with it, in place of the KeyQuota's Limit, until ttl has passed;
//   - the key itself states it, for ttl or until Redis drops the key (once
//     no call counts in it), and a Throttler already made on the key, in
//     any replica, reads it with its next round trip. One made with a
//     higher limit keeps to the learned one at once (see
//     Throttler.LowerLimit). One made with a lower limit is made anew with
//     the learned one by the next For for the key in its Group, and this
//     process's at once: the Throttler replaced serves the calls it
//     already has, sharing the key's quota with its successor as two
//     replicas would.
//
// Learn makes key's Throttler first when the Group holds none (see For:
// one GET, within a second). It then takes a SET, within a second, and one
// write, within the Redis timeout, after up to three samples of the
// server's clock, each within the Redis timeout, for a Throttler that has
// none (a Group's Throttlers on one server share theirs). So Learn takes
// two round trips on a key the Group holds, three on one it makes, and up
// to six. ctx bounds each of them but For's GET, which has its second
// alone. It returns an error wrapping ErrInvalidArgument when the Group
// was made without WithLearnedLimits, key is empty, limit is below 1 or
// ttl is not positive; For's errors; and one wrapping ErrRedis when Redis
// fails (a limit not recorded is not stated either).
func (g *Group) Learn(ctx context.Context, key string, limit int, ttl time.Duration) error {
	switch {
	case !g.opt.learned:
		return invalidf("Group.Learn: the Group was made without WithLearnedLimits")
	case key == "":
		return invalidf("Group.Learn: empty key")
	case limit < 1 || ttl <= 0:
		return invalidf("Group.Learn(%d, %s): limit must be at least 1 and ttl positive", limit, ttl)
	}
	t, err := g.For(key) // through it, the key states the limit
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, learnedTimeout)
	defer cancel()
	if err := g.values.Set(rctx, t.Key()+learnedSuffix, limit, ttl); err != nil {
		return redisError(err)
	}
	// The member LowerLimit writes, whatever the limit: a Throttler made
	// with a higher one is lowered, one made with a lower one finds the
	// key states more (see outgrownLocked).
	err = t.writeMeta(ctx, func(serverNow int64) metaWrite {
		end := serverNow + ttl.Microseconds()
		m := metaWrite{
			MetaWrite: core.MetaWrite{Limit: int64(limit), LimitEnd: end},
			apply:     func() { t.shared.lowerTo(0, 0, t.Limit(), &t.stats) },
		}
		if limit < t.Limit() {
			m.apply = func() { t.shared.lowerTo(limit, end, t.Limit(), &t.stats) }
		}
		return m
	})
	if err != nil {
		return err
	}
	if limit > t.Limit() {
		g.retire(idOf(key), t)
	}
	return nil
}

// learnedLimit reads the limit recorded for the key whose first Redis key
// is base, if any.
func (g *Group) learnedLimit(base string) (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), learnedTimeout)
	defer cancel()
	v, found, err := g.values.Get(ctx, base+learnedSuffix)
	if err == nil && !found {
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

// retire drops t, when it is still the Group's for id: For makes the key's
// Throttler anew.
func (g *Group) retire(id keyID, t *Throttler) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.byID[id]; e != nil && e.t == t {
		g.removeLocked(e)
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
