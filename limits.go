package throttler

import (
	"context"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
)

// WithLimit adds a limit that every call also counts against: at most limit
// calls in any window of length interval, kept in its own sorted set under
// key. A call is admitted only when every limit of the Throttler has room,
// in one Redis round trip; the members of a call any limit refuses are
// removed from every key. Use it for an API that states several limits at
// once (10 per second and 5000 per hour), or for per-user and per-account
// quotas.
//
// All keys of one Throttler must hash to the same Redis Cluster slot: give
// them the same {tag}, as in "{github}:hourly" and "{github}:burst". New
// refuses keys whose {tag}s (or, without one, whole keys) differ, whatever
// the client, so that code tested on one server keeps working on a
// Cluster. Other Throttlers that share one of the keys must use the same
// limit and interval for it.
func WithLimit(key string, limit int, interval time.Duration) Option {
	return func(o *options) error {
		if err := checkWindow("WithLimit", key, limit, interval); err != nil {
			return err
		}
		o.limits.extra = append(o.limits.extra, core.Window{Key: key, Limit: limit, Interval: interval})
		return nil
	}
}

// limitOptions are the limits a call counts against besides New's.
type limitOptions struct {
	extra []core.Window // WithLimit
	pace  int           // WithPacing's burst, 0 = none
}

// WithPacing spreads New's limit over its interval: besides it, at most
// burst calls go in any window of interval*burst/limit. A sliding window
// alone lets a whole interval's calls go at once (5000 calls an hour, all
// in the first seconds, then none for the rest of the hour); with
// WithPacing(10), 5000 an hour go at most 10 in any 7.2s, about 1.4 a
// second, and a caller that was idle may still send a burst of 10 at once.
//
// The pace is a limit of its own (see WithLimit), in a sorted set under
// New's key with ":pace" appended, in the same Redis Cluster slot: a key
// without a {tag}, such as "github", paces in "{github}:pace", which
// hashes as "github" does. Every Throttler on the key must use the same
// burst. burst must be at least 1 and below New's limit, and the pace's
// window at least 1ms; New refuses it otherwise, with an error wrapping
// ErrInvalidArgument.
func WithPacing(burst int) Option {
	return func(o *options) error {
		if burst < 1 {
			return invalidf("WithPacing(%d): burst must be at least 1", burst)
		}
		o.limits.pace = burst
		return nil
	}
}

// paceWindow is the limit WithPacing adds to New's first: burst calls per
// interval*burst/limit, under paceKey(key).
func paceWindow(first core.Window, burst int) (core.Window, error) {
	if burst >= first.Limit {
		return core.Window{}, invalidf("WithPacing(%d): burst must be below the limit %d (a burst of the whole limit paces nothing)", burst, first.Limit)
	}
	w := core.Window{Key: paceKey(first.Key), Limit: burst, Interval: first.Interval * time.Duration(burst) / time.Duration(first.Limit)}
	if err := checkWindow("WithPacing", w.Key, w.Limit, w.Interval); err != nil {
		return core.Window{}, err
	}
	return w, nil
}

// paceKey is the key WithPacing's window lives under: key with ":pace"
// appended, with key as its {tag} when it has none, so that both hash to
// the same Redis Cluster slot.
func paceKey(key string) string {
	if redisstore.HashTag(key) != key {
		return key + ":pace"
	}
	return "{" + key + "}:pace"
}

// checkWindow checks the key, limit and interval of one limit, given to
// New or WithLimit (named by where).
func checkWindow(where, key string, limit int, interval time.Duration) error {
	switch {
	case key == "":
		return invalidf("%s: empty key", where)
	case limit < 1:
		return invalidf("%s(%q): limit %d must be at least 1", where, key, limit)
	case interval <= 0:
		return invalidf("%s(%q): interval %s must be positive", where, key, interval)
	case interval < time.Millisecond:
		return invalidf("%s(%q): interval %s is below the 1ms resolution of a shared window", where, key, interval)
	case interval > 366*24*time.Hour:
		return invalidf("%s(%q): interval %s is longer than a year", where, key, interval)
	}
	return nil
}

// sameSlot checks that key shares first's Redis Cluster hash slot.
func sameSlot(first, key string) error {
	if redisstore.HashTag(first) != redisstore.HashTag(key) {
		return invalidf("keys %q and %q may lie in different Redis Cluster slots: give them the same {tag}", first, key)
	}
	return nil
}

// LowerLimit lowers the first limit (the one given to New) to n calls per
// interval for every Throttler on the key, for the next d, through Redis.
// Calls already admitted still count: after lowering from 100 to 50, no new
// call goes until fewer than 50 calls remain in the window.
//
// The lowered limit never exceeds the one given to New: a Throttler that
// reads a lower one uses it, and n at or above New's limit ends a lowering.
// It lasts for d, or until the key goes unused for longer than its TTL
// (the longest interval + buffer + reserve-ahead + 2s) and Redis drops it.
// While it lasts, a call of more units than the lowered limit allows its
// priority (see AllowN) fails with an error wrapping ErrInvalidArgument.
//
// Calls of this process holding slots reserved ahead under the higher limit
// give them back and reserve again, and so do those of every process with
// calls sleeping toward their slots, which hears of it within a Redis round
// trip of the write (the change is published as a pause is; see
// PauseUntil); every other Throttler learns of it with its next round
// trip. LowerLimit returns an error wrapping ErrInvalidArgument when n < 1 or
// d <= 0, and one wrapping ctx.Err() when ctx had ended before the call:
// nothing changes then. It returns an error wrapping ErrRedis when Redis
// fails or ctx ends during the write: the change then holds in this
// process only.
func (t *Throttler) LowerLimit(ctx context.Context, n int, d time.Duration) error {
	if err := usable(t, ctx, "LowerLimit"); err != nil {
		return err
	}
	if n < 1 || d <= 0 {
		return invalidf("LowerLimit(%d, %s): n must be at least 1 and d positive", n, d)
	}
	if ctx.Err() != nil {
		return ctxError(ctx)
	}
	return t.writeMeta(ctx, func(serverNow int64) metaWrite {
		if n >= t.Limit() {
			return metaWrite{
				MetaWrite: core.MetaWrite{ClearLimit: true, News: &core.News{LimitSet: true}},
				apply:     func() { t.shared.lowerTo(0, 0, t.Limit(), &t.stats) },
			}
		}
		end := serverNow + d.Microseconds()
		return metaWrite{
			MetaWrite: core.MetaWrite{Limit: int64(n), LimitEnd: end, News: &core.News{Limit: int64(n), LimitEnd: end, LimitSet: true}},
			apply:     func() { t.shared.lowerTo(n, end, t.Limit(), &t.stats) },
		}
	})
}
