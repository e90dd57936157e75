package throttler

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

// Stats and the Observer count what happened, exactly.
func TestStatsAndObserver(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		var (
			mu       sync.Mutex
			admitted int
			samples  int
			paused   []time.Time
		)
		// No buffer: an Allow whose goroutine a loaded machine wakes past
		// its slot would give the slot back and be refused (a late wake, see
		// TestLateWakeAtTheLimitTakesItsSlotAgain), not what is counted here.
		th := mustNew(t, dial(), key, 3, time.Minute, WithBuffer(0), WithObserver(Observer{
			Admitted: func(n int, _ time.Duration) { mu.Lock(); admitted += n; samples++; mu.Unlock() },
			Paused:   func(until time.Time) { mu.Lock(); paused = append(paused, until); mu.Unlock() },
		}))
		if err := th.WaitN(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if res, err := th.Allow(ctx); err != nil || !res.Allowed {
			t.Fatalf("Allow: (%+v, %v)", res, err)
		}
		if res, err := th.Allow(ctx); err != nil || res.Allowed {
			t.Fatalf("Allow over the limit: (%+v, %v), want refused", res, err)
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := th.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait over the limit: %v", err)
		}
		until := time.Now().Add(time.Minute)
		if err := th.PauseUntil(ctx, until); err != nil {
			t.Fatal(err)
		}
		s := th.Stats()
		want := Stats{Admitted: 3, Waits: 1, Abandoned: 1, Denied: 1, Pauses: 1, LimitNow: 3}
		want.Rejected[RejectedDeadline] = 1 // the Wait whose slot lay past its deadline
		got := s
		got.Waited, got.Redis.RoundTrips, got.PausedUntil, got.Redis.ClockError = 0, 0, time.Time{}, 0
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Stats = %+v, want %+v (ignoring Waited, RoundTrips, PausedUntil, ClockError)", got, want)
		}
		if s.Redis.ClockError <= 0 || s.Redis.ClockError > time.Second {
			t.Errorf("ClockError = %s, want half a round trip on loopback", s.Redis.ClockError)
		}
		if s.Redis.RoundTrips < 3 {
			t.Errorf("RoundTrips = %d, want at least one per call that reached Redis (3)", s.Redis.RoundTrips)
		}
		if d := s.PausedUntil.Sub(until); d < -time.Second || d > time.Second {
			t.Errorf("PausedUntil = %s, want about %s", s.PausedUntil, until)
		}
		mu.Lock()
		defer mu.Unlock()
		if admitted != 3 || samples != 2 || len(paused) != 1 {
			t.Errorf("Observer saw %d calls admitted in %d events and %d pauses, want 3 in 2 and 1", admitted, samples, len(paused))
		}
		waitIdle(t, th)
	})
}

// Usage reads the shared window without changing it.
func TestUsage(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		fast, slow := "{"+key+"}:fast", "{"+key+"}:slow"
		th := mustNew(t, dial(), fast, 4, time.Minute, WithLimit(slow, 10, time.Hour))
		if err := th.WaitN(ctx, 4); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		us, err := th.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(us) != 2 || us[0].Key != fast || us[1].Key != slow {
			t.Fatalf("Usage keys: %+v, want the fast limit then the slow one", us)
		}
		// A call admitted now is scored for when the reply reaches its
		// caller, a round trip ahead: it may still count as reserved.
		for i, want := range []int{4, 10} {
			if u := us[i]; u.Used+u.Reserved != 4 || u.Limit != want {
				t.Fatalf("Usage of %s: used %d + reserved %d of %d; want 4 calls of %d", u.Key, u.Used, u.Reserved, u.Limit, want)
			}
		}
		if d := us[0].NextFree.Sub(before); d < 55*time.Second || d > 62*time.Second {
			t.Errorf("fast NextFree in %s, want about a minute (interval + buffer)", d)
		}
		if d := us[1].NextFree.Sub(before); d > time.Second {
			t.Errorf("slow NextFree in %s, want now (there is room)", d)
		}
		if !us[0].PausedUntil.IsZero() {
			t.Errorf("PausedUntil %s with no pause", us[0].PausedUntil)
		}
		again, err := th.Usage(ctx)
		if err != nil || again[0].Used+again[0].Reserved != 4 {
			t.Fatalf("a second Usage: (%+v, %v); reading must not change the window", again, err)
		}
		waitIdle(t, th)
	})
}

// A Redis that fails the first sample of its clock counts as a Redis error,
// as every failed Redis call does.
func TestStatsCountFirstSampleError(t *testing.T) {
	mr, c := miniClient(t)
	var seen int
	var mu sync.Mutex
	th := mustNew(t, c, "k", 10, time.Minute, WithRedisTimeout(100*time.Millisecond),
		WithObserver(Observer{RedisError: func(error) { mu.Lock(); seen++; mu.Unlock() }}))
	mr.Close()
	if err := th.Wait(context.Background()); !errors.Is(err, ErrRedis) {
		t.Fatalf("Wait with Redis down: %v, want ErrRedis", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := th.Stats().Redis.Errors; got < 1 || uint64(seen) != got {
		t.Errorf("Stats.Redis.Errors = %d and Observer.RedisError called %d times after a failed Wait; want the same, at least 1", got, seen)
	}
	waitIdle(t, th)
}
