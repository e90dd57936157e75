package throttler

import (
	"context"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// PauseUntil makes every Throttler on the key (every replica, through Redis)
// admit no call before until, read on the local clock. Use it when the API
// itself says to back off, as a 429 or 503 with Retry-After does; the
// Transport does it for HTTP responses.
//
// Pauses only extend: a pause that ends before one already in force changes
// nothing, and one in the past is a no-op. Calls waiting in this process
// whose slot falls inside the pause give the slot back and wait for one
// after it; calls already on their way are not recalled. The pause is also
// published (Redis Pub/Sub, in the round trip that writes it): every
// process with calls sleeping toward their slots hears of it within a
// Redis round trip of the write, and its calls whose slot falls inside the
// pause give it back too. Other processes learn of it with their next
// round trip: the one that reserves their next call, or, for one whose
// worker waits for slots to come within reach, within 500ms (or a
// hundredth of the window, if longer).
//
// While a pause lasts, WaitN waits for it to end (or fails at once if it
// ends after the context's deadline), and AllowN refuses with RetryAfter
// set to what is left of it. The pause holds in this process at once, even
// when the write to Redis fails (the other processes do not know then).
// PauseUntil returns an error wrapping ctx.Err() when ctx had ended before
// the call (nothing changes then), and one wrapping ErrRedis when Redis
// fails or ctx ends during the write.
func (t *Throttler) PauseUntil(ctx context.Context, until time.Time) error {
	if err := usable(t, ctx, "PauseUntil"); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctxError(ctx)
	}
	return t.writeMeta(ctx, func(serverNow int64) metaWrite {
		end := t.clock.Server(until)
		if end <= serverNow {
			return metaWrite{}
		}
		return metaWrite{MetaWrite: core.MetaWrite{Pause: end, News: &core.News{Pause: end}}, apply: func() { t.shared.pauseTo(end, t.clock, &t.stats) }}
	})
}

// metaWrite is a change to what the first limit's key keeps beside its
// calls, and what it means for this Throttler: apply runs under t.mu
// before the write (and holds even if the write fails).
type metaWrite struct {
	core.MetaWrite
	apply func()
}

// writeMeta writes what plan returns for the server's now to the first
// limit's key, keeping the key alive at least as long as the pause.
func (t *Throttler) writeMeta(ctx context.Context, plan func(serverNow int64) metaWrite) error {
	var syncErr error
	if !t.clock.Synced() {
		// Without a sample the estimate takes the local clock for the
		// server's: good enough for this process alone, should Redis fail.
		syncErr = t.sampleClock(ctx, firstSamples)
	}
	serverNow := t.clock.Server(t.now())
	m := plan(serverNow)
	if m.Empty() {
		return nil
	}
	// What the caller knows holds here at once, before the write reaches
	// the others: this process's own calls must not wait a round trip.
	if m.apply != nil {
		t.mu.Lock()
		m.apply()
		t.mu.Unlock()
		t.worker.nudge()
	}
	if syncErr != nil {
		t.stats.redisError(syncErr)
		return redisError(syncErr)
	}
	ttl := t.rules.TTL()
	if m.Pause > 0 {
		ttl += time.Duration(m.Pause-serverNow) * time.Microsecond
	}
	ctx, cancel := context.WithTimeout(ctx, t.opt.redisTimeout)
	defer cancel()
	err := t.st.WriteMeta(ctx, m.MetaWrite, ttl)
	if err != nil {
		t.mu.Lock()
		t.stats.logRedis(t.now(), err, "the change was not written")
		t.mu.Unlock()
		t.stats.redisError(err)
		return redisError(err)
	}
	return nil
}
