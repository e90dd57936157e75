package throttler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A pause set by one replica holds for another (separate client, separate
// Throttler): nothing is admitted before its end, Allow refuses with the
// time left, and a Wait whose deadline falls inside it fails at once.
func TestPauseUntilIsShared(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		var rec recorder
		a := rec.watch(mustNew(t, dial(), key, 10, time.Second))
		b := rec.watch(mustNew(t, dial(), key, 10, time.Second))
		if err := a.Wait(ctx); err != nil {
			t.Fatalf("a.Wait before the pause: %v", err)
		}
		const pause = 400 * time.Millisecond
		if err := a.PauseUntil(ctx, time.Now().Add(pause)); err != nil {
			t.Fatalf("PauseUntil: %v", err)
		}
		pauseEnd := serverMicros(t, dial()) + (pause - 50*time.Millisecond).Microseconds()

		res, err := b.Allow(ctx)
		if err != nil || res.Allowed {
			t.Fatalf("b.Allow during the pause: got (%+v, %v), want refused", res, err)
		}
		if res.RetryAfter <= 0 || res.RetryAfter > pause {
			t.Fatalf("b.Allow during the pause: RetryAfter %s, want within (0, %s]", res.RetryAfter, pause)
		}
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := b.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("b.Wait with a deadline inside the pause: %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 90*time.Millisecond {
			t.Logf("note: the refused Wait took %s (it should not sleep)", d)
		}
		for _, th := range []*Throttler{a, b} {
			if err := th.Wait(ctx); err != nil {
				t.Fatalf("Wait after the pause: %v", err)
			}
		}
		scores := rec.scores()
		if len(scores) != 3 {
			t.Fatalf("recorded %d admissions, want 3", len(scores))
		}
		for _, s := range scores[1:] {
			if s < pauseEnd {
				t.Fatalf("a call was admitted at %d, inside the pause that ends at about %d", s, pauseEnd)
			}
		}
		if st := b.Stats(); st.Pauses != 1 {
			t.Fatalf("b.Stats: %+v, want one pause learned", st)
		}
		waitIdle(t, a)
		waitIdle(t, b)
	})
}

// Pauses only extend: an earlier end does not shorten one in force.
func TestPauseOnlyExtends(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		c := dial()
		th := mustNew(t, c, key, 10, time.Second)
		long := time.Now().Add(time.Minute)
		if err := th.PauseUntil(ctx, long); err != nil {
			t.Fatal(err)
		}
		if err := th.PauseUntil(ctx, time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := th.PauseUntil(ctx, time.Now().Add(-time.Second)); err != nil {
			t.Fatalf("a pause in the past: %v, want a no-op", err)
		}
		other := mustNew(t, dial(), key, 10, time.Second)
		us, err := other.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := us[0].PausedUntil.Sub(long); d < -time.Second || d > time.Second {
			t.Fatalf("PausedUntil %s, want about %s (the longer pause)", us[0].PausedUntil, long)
		}
		ttl, err := c.TTL(ctx, key).Result()
		if err != nil || ttl < 50*time.Second {
			t.Fatalf("TTL of the key during a 1m pause: %s (%v), want it to outlive the pause", ttl, err)
		}
	})
}

// A caller already admitted for a slot in the future gives it back when a
// pause starts before that slot, and goes after the pause.
func TestPauseRecallsSleepingWaiters(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		var rec recorder
		th := rec.watch(mustNew(t, dial(), key, 2, 300*time.Millisecond, WithBuffer(0)))
		// Fill the window so that the next callers are given future slots.
		for range 2 {
			if err := th.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan error, 2)
		for range 2 {
			go func() { done <- th.Wait(ctx) }()
		}
		// Let them reserve their future slots, then pause past them.
		deadline := time.Now().Add(5 * time.Second)
		for len(rec.scores()) < 4 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		const pause = 600 * time.Millisecond
		if err := th.PauseUntil(ctx, time.Now().Add(pause)); err != nil {
			t.Fatal(err)
		}
		pauseEnd := serverMicros(t, dial()) + (pause - 50*time.Millisecond).Microseconds()
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		scores := rec.scores()
		if len(scores) != 4 {
			t.Fatalf("recorded %d admissions after give-backs, want 4: %v", len(scores), scores)
		}
		for _, s := range scores[2:] {
			if s < pauseEnd {
				t.Fatalf("a call went at %d, inside the pause ending about %d", s, pauseEnd)
			}
		}
		assertWindow(t, scores, 300*time.Millisecond, 2)
		waitIdle(t, th)
	})
}

// A pause and a lowered limit hold in this process at once even when Redis
// cannot be reached, before the Throttler ever read the server's clock:
// PauseUntil and LowerLimit return ErrRedis, and the change is in force here.
func TestMetaHoldsLocallyWhenRedisIsDown(t *testing.T) {
	mr := miniredis.RunT(t)
	addr := mr.Addr()
	mr.Close() // nothing listens there now
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	th, err := New(c, "k", 10, time.Second, WithRedisTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := th.PauseUntil(ctx, time.Now().Add(time.Minute)); !errors.Is(err, ErrRedis) {
		t.Fatalf("PauseUntil with Redis down: %v, want ErrRedis", err)
	}
	if s := th.Stats(); s.PausedUntil.IsZero() {
		t.Fatal("the pause does not hold in this process")
	}
	if err := th.LowerLimit(ctx, 3, time.Minute); !errors.Is(err, ErrRedis) {
		t.Fatalf("LowerLimit with Redis down: %v, want ErrRedis", err)
	}
	if s := th.Stats(); s.LimitNow != 3 {
		t.Fatalf("limit in force here %d, want 3", s.LimitNow)
	}
}
