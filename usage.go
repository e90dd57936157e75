package throttler

import (
	"context"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// Usage describes one limit's shared window as Redis holds it, read by
// Throttler.Usage. NextFree and PausedUntil are on the local clock
// (converted with the offset the read observed); Now is on the Redis
// server's.
type Usage struct {
	// Key is the sorted set holding the window.
	Key string
	// Limit is the limit in force: the one configured, or lower while
	// LowerLimit has lowered it (first limit only).
	Limit int
	// Interval is the length of the window.
	Interval time.Duration
	// Used is how many calls count in the window that ends now (their
	// slot is within the last interval plus buffer).
	Used int
	// Reserved is how many calls hold a slot after now: waiters sleeping
	// until their turn, and calls just admitted, which are scored for when
	// the reply reaches them (a round trip ahead).
	Reserved int
	// NextFree is the earliest time one more call could go under this
	// limit: now when there is room.
	NextFree time.Time
	// Debt is how many of the units in Used are debt: the excess of
	// permits settled above their estimate (see Permit.Settle). In a
	// compacted window (Bucket > 0), only the debt of calls younger than
	// the window's compaction age.
	Debt int
	// Bucket is how this Throttler keeps the window: zero when Redis holds
	// a member per call in the window (a limit under WithCompactFrom's,
	// 5,000 by default); otherwise the window is compacted: calls scored
	// more than a quarter of the interval plus buffer ago (at most a
	// minute), or with 2,048 newer calls after them, are counted per
	// bucket of this width (the window plus buffer over 1,024) instead,
	// and every bucket overlapping a window counts wholly. See "Memory" in
	// the README.
	Bucket time.Duration
	// PausedUntil is the end of a shared pause (first limit only; zero when
	// none is in force).
	PausedUntil time.Time
	// Now is the time the window was read, on the Redis server's clock.
	Now time.Time
}

// Usage reads every limit's window from Redis, the first limit (New's)
// first, in two round trips bounded together by ctx and the Redis timeout,
// however many limits there are and however Redis keeps them. It changes
// nothing and admits nothing; it is meant for dashboards and the throttler
// command: it reads every member counted in Used (to tell debt from
// calls). It returns an error wrapping ErrRedis when Redis fails.
func (t *Throttler) Usage(ctx context.Context) ([]Usage, error) {
	if err := usable(t, ctx, "Usage"); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, t.opt.redisTimeout)
	defer cancel()
	rd, err := t.st.Usage(ctx, t.usageLimits)
	if err != nil {
		t.stats.redisError(err)
		return nil, redisError(err)
	}
	server := rd.Server
	now := server.UnixMicro()
	// Server time to local: the offset this read observed.
	local := func(us int64) time.Time {
		return t.now().Add(time.Duration(us-now) * time.Microsecond)
	}
	lims := rd.Lims
	out := make([]Usage, len(t.rules.Wins))
	for i, x := range t.rules.Wins {
		u := Usage{
			Key:      x.Key,
			Limit:    lims[i],
			Interval: x.Interval,
			Used:     rd.Used[i],
			Debt:     rd.Debt[i],
			Reserved: rd.Reserved[i],
			Bucket:   time.Duration(x.Bucket) * time.Microsecond,
			NextFree: local(now),
			Now:      server,
		}
		// The limit-th newest member must leave the window before one more
		// call fits.
		if zs := core.Sane(rd.Nth[i], now+core.FutureBound); len(zs) == 1 && zs[0].Score > 0 {
			if free := zs[0].Score + x.W; free > now {
				u.NextFree = local(free)
			}
		}
		if i == 0 && rd.Meta.Pause > now {
			u.PausedUntil = local(rd.Meta.Pause)
			u.NextFree = maxTime(u.NextFree, u.PausedUntil)
		}
		out[i] = u
	}
	return out, nil
}

// usageLimits returns the limits in force at server time now, given what
// the first key keeps beside its calls.
func (c *config) usageLimits(now int64, m core.Meta) []int {
	lims := make([]int, len(c.rules.Wins))
	for i, x := range c.rules.Wins {
		lims[i] = x.Limit
	}
	lims[0] = m.LimitAt(now, lims[0])
	return lims
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
