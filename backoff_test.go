package throttler

import (
	"context"
	"testing"
	"time"
)

// BackOff pauses every replica; a second refusal within a back-off's
// length after the first ended doubles it, whichever replica is refused,
// up to most; one while the back-off lasts changes nothing.
func TestBackOffGrowsAcrossReplicas(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		a := mustNew(t, dial(), key, 100, time.Second)
		b := mustNew(t, dial(), key, 100, time.Second)
		wait := func(th *Throttler) time.Duration {
			t.Helper()
			start := time.Now()
			if err := th.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			return time.Since(start)
		}
		wait(a) // a clock sample for each: the last back-off is read once synced
		wait(b)
		// backOff has th back off for d (at most most) and returns how long
		// th is paused for, within the time the call took and the clock
		// estimate's error, which it allows for.
		backOff := func(th *Throttler, d, most, want time.Duration) {
			t.Helper()
			before := time.Now()
			if err := th.BackOff(ctx, d, most); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			slack := 5*time.Millisecond + th.Stats().Redis.ClockError
			if until := th.Stats().PausedUntil; until.Before(before.Add(want-slack)) || until.After(after.Add(want+slack)) {
				t.Fatalf("paused for %s after BackOff(%s, %s) took %s, want %s", until.Sub(before), d, most, after.Sub(before), want)
			}
		}
		backOff(a, 200*time.Millisecond, time.Second, 200*time.Millisecond)
		until := a.Stats().PausedUntil
		if err := b.BackOff(ctx, 200*time.Millisecond, time.Second); err != nil { // while it lasts: no change
			t.Fatal(err)
		}
		if got := a.Stats().PausedUntil; !got.Equal(until) {
			t.Fatalf("a refusal while the back-off lasted moved its end by %s", got.Sub(until))
		}
		if d := wait(b); d < 150*time.Millisecond {
			t.Fatalf("b waited %s under a 200ms back-off", d)
		}
		backOff(b, 200*time.Millisecond, time.Second, 400*time.Millisecond) // doubled
		if d := wait(a); d < 350*time.Millisecond {
			t.Fatalf("a waited %s under b's 400ms back-off", d)
		}
		backOff(a, 200*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond) // 800ms, capped
		waitIdle(t, a)
		waitIdle(t, b)
	})
}
