package throttler

import (
	"context"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// DefaultMaxPause is the longest a refusal pauses every replica unless
// told otherwise (Transport.MaxPause, BackOff's most).
const DefaultMaxPause = 15 * time.Minute

// BackOff pauses every replica after the API refused a call without
// saying until when (a 429 without Retry-After; gRPC's RESOURCE_EXHAUSTED
// without RetryInfo), as a Transport does (see Transport.Backoff): for d
// (a second when d is zero or less), or twice the last back-off when the
// API refuses again within that back-off's length after it ended, at most
// most (DefaultMaxPause when zero or less). A refusal while a back-off
// lasts (of a call sent before it began) changes nothing. The last
// back-off is kept in Redis beside the calls, so it grows whichever
// replica is refused. The pause holds in this process even when the write
// fails; the error is the write's.
func (t *Throttler) BackOff(ctx context.Context, d, most time.Duration) error {
	if err := usable(t, ctx, "BackOff"); err != nil {
		return err
	}
	if d <= 0 {
		d = time.Second
	}
	if most <= 0 {
		most = DefaultMaxPause
	}
	serverNow := t.clock.Server(t.now())
	if t.clock.Synced() {
		rctx, cancel := context.WithTimeout(ctx, t.opt.redisTimeout)
		got, err := t.st.ReadCounters(rctx, 0, 0)
		cancel()
		switch {
		case err != nil:
			t.stats.redisError(err)
		case got.BackoffEnd > serverNow:
			return nil // a back-off is under way: this call went before it
		case got.Backoff > 0 && serverNow-got.BackoffEnd < got.Backoff:
			d = max(d, 2*time.Duration(got.Backoff)*time.Microsecond)
		}
	}
	d = min(d, most)
	return t.writeMeta(ctx, func(serverNow int64) metaWrite {
		end := serverNow + d.Microseconds()
		return metaWrite{
			MetaWrite: core.MetaWrite{Pause: end, Backoff: d.Microseconds(), BackoffEnd: end, News: &core.News{Pause: end}},
			apply:     func() { t.shared.pauseTo(end, t.clock, &t.stats) },
		}
	})
}
