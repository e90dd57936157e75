package throttler

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// rejectedAtOnce fills the window of th (limit calls), then checks that a
// call made with ctx fails at once with want, without a round trip, and is
// counted under why.
func rejectedAtOnce(t *testing.T, th *Throttler, limit int, ctx context.Context, want error, why Rejection) {
	t.Helper()
	for range limit {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	before := th.Stats()
	err := th.Wait(ctx)
	if !errors.Is(err, want) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait beyond the window = %v, want %v and context.DeadlineExceeded", err, want)
	}
	after := th.Stats()
	if after.Redis.RoundTrips != before.Redis.RoundTrips {
		t.Fatalf("the refusal took %d round trips; the last reply already told", after.Redis.RoundTrips-before.Redis.RoundTrips)
	}
	if after.Rejected[why] != before.Rejected[why]+1 {
		t.Fatalf("Stats.Rejected[%s] = %d, want %d", why, after.Rejected[why], before.Rejected[why]+1)
	}
}

func TestMaxWaitRejectsWithoutRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var seen []Rejection
		th := mustNew(t, dial(), key, 2, time.Second, WithMaxWait(100*time.Millisecond),
			WithObserver(Observer{Rejected: func(r Rejection) { seen = append(seen, r) }}))
		rejectedAtOnce(t, th, 2, context.Background(), ErrMaxWait, RejectedMaxWait)
		if len(seen) != 1 || seen[0] != RejectedMaxWait {
			t.Fatalf("Observer.Rejected saw %v", seen)
		}
	})
}

func TestDeadlineRejectsWithoutRoundTrip(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		th := mustNew(t, dial(), key, 2, time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		rejectedAtOnce(t, th, 2, ctx, context.DeadlineExceeded, RejectedDeadline)
		if th.Stats().Abandoned != 1 {
			t.Fatalf("Abandoned = %d, want the rejected call counted", th.Stats().Abandoned)
		}
	})
}

// TestMaxWaitEndsAQueuedCall: a call that waits (no slot known yet) fails
// when its maximum wait has passed, with ErrMaxWait.
func TestMaxWaitEndsAQueuedCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		th := mustNew(t, dial(), key, 1, 10*time.Second, WithMaxWait(50*time.Millisecond), WithReserveAhead(0))
		// The slot taken by a call that does not wait: a first Wait's round
		// trips (clock samples, the reservation) could overrun 50ms on a
		// loaded machine.
		if res, err := th.Allow(context.Background()); err != nil || !res.Allowed {
			t.Fatalf("Allow = %+v, %v; want allowed", res, err)
		}
		th.mu.Lock()
		th.known = core.Known{Near: true} // as if no reply had told of the next slot
		th.mu.Unlock()
		err := th.Wait(context.Background())
		if !errors.Is(err, ErrMaxWait) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait = %v, want ErrMaxWait", err)
		}
		if got := th.Stats().Rejected[RejectedMaxWait]; got != 1 {
			t.Fatalf("Rejected[max wait] = %d", got)
		}
	})
}

// TestMaxQueueShedsTheLowestPriority: with the queue full, a call sheds the
// newest call of the lowest priority below its own; a call with none below
// it fails at once; a high-priority call goes before the normal one that
// waited longer.
func TestMaxQueueShedsTheLowestPriority(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		th := mustNew(t, dial(), key, 1, 500*time.Millisecond, WithMaxQueue(2), WithReserveAhead(0))
		if err := th.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			order []string
		)
		start := func(name string, p Priority, waiting int) chan error {
			errs := make(chan error, 1)
			go func() {
				err := th.Wait(ContextWithPriority(context.Background(), p))
				if err == nil {
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
				}
				errs <- err
			}()
			waitLocked(t, th, 5*time.Second, name+" never waited", func() bool { return th.worker.waiting == waiting })
			return errs
		}
		low1 := start("low1", PriorityLow, 1)
		low2 := start("low2", PriorityLow, 2)
		normal := start("normal", PriorityNormal, 2)
		if err := <-low2; !errors.Is(err, ErrQueueFull) {
			t.Fatalf("the newest low call = %v, want shed (ErrQueueFull)", err)
		}
		if err := th.Wait(ContextWithPriority(context.Background(), PriorityLow)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("a low call with nobody below it to shed = %v, want ErrQueueFull at once", err)
		}
		high := start("high", PriorityHigh, 2)
		if err := <-low1; !errors.Is(err, ErrQueueFull) {
			t.Fatalf("the remaining low call = %v, want shed (ErrQueueFull)", err)
		}
		for _, c := range []chan error{high, normal} {
			if err := <-c; err != nil {
				t.Fatal(err)
			}
		}
		s := th.Stats()
		if s.Rejected[RejectedShed] != 2 || s.Rejected[RejectedQueueFull] != 1 {
			t.Fatalf("Rejected = %v, want 2 shed, 1 queue full", s.Rejected)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(order) != 2 || order[0] != "high" {
			t.Fatalf("admitted in order %v, want high before normal", order)
		}
		waitIdle(t, th)
		if n := len(keyMembers(t, dial(), key)); n != 3 {
			t.Fatalf("%d members in Redis, want the 3 admitted calls' (nothing of the shed)", n)
		}
	})
}

func TestBoundedWaitingBadInput(t *testing.T) {
	c := redis.NewClient(&redis.Options{})
	defer c.Close()
	for _, o := range []Option{WithMaxWait(0), WithMaxWait(-time.Second), WithMaxQueue(0), WithMaxQueue(-1)} {
		if _, err := New(c, "k", 1, time.Second, o); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("New with a bad bound: %v, want ErrInvalidArgument", err)
		}
	}
}

func TestContextWithPriority(t *testing.T) {
	ctx := context.Background()
	if p := PriorityFromContext(ctx); p != PriorityNormal {
		t.Fatalf("default priority %s", p)
	}
	if p := PriorityFromContext(ContextWithPriority(ctx, PriorityHigh)); p != PriorityHigh {
		t.Fatalf("priority %s, want high", p)
	}
	if p := PriorityFromContext(ContextWithPriority(ctx, 9)); p != PriorityHigh {
		t.Fatalf("priority 9 clamped to %s, want high", p)
	}
}

// TestPriorityShareLeavesRoomForHigher: low-priority calls fill a window
// only up to their share, across replicas, and high-priority calls then
// find the rest free.
func TestPriorityShareLeavesRoomForHigher(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const limit, interval = 10, time.Hour
		a := mustNew(t, dial(), key, limit, interval, WithPriorityShare(PriorityLow, 0.5))
		b := mustNew(t, dial(), key, limit, interval, WithPriorityShare(PriorityLow, 0.5))
		allowed := func(th *Throttler, p Priority, tries int) int {
			ctx := ContextWithPriority(context.Background(), p)
			n := 0
			for range tries {
				res, err := th.Allow(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					n++
				}
			}
			return n
		}
		if n := allowed(a, PriorityLow, 4) + allowed(b, PriorityLow, 4); n != 5 {
			t.Fatalf("low calls allowed on two replicas: %d, want 5 (half of 10)", n)
		}
		if n := allowed(a, PriorityNormal, 3) + allowed(b, PriorityHigh, 3); n != 5 {
			t.Fatalf("normal and high calls allowed after the low ones: %d, want the other 5", n)
		}
	})
}

// TestPriorityShareHoldsForWaiters: waiting low-priority calls on two
// replicas never put more than their share in any window, and the slots
// they learn are theirs (they wait for them, not for refusals).
func TestPriorityShareHoldsForWaiters(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const limit, interval = 6, 200 * time.Millisecond
		var rec recorder
		ths := []*Throttler{
			rec.watch(mustNew(t, dial(), key, limit, interval, WithPriorityShare(PriorityLow, 0.5))),
			rec.watch(mustNew(t, dial(), key, limit, interval, WithPriorityShare(PriorityLow, 0.5))),
		}
		ctx := ContextWithPriority(context.Background(), PriorityLow)
		var wg sync.WaitGroup
		for i := range 24 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := ths[i%2].Wait(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		assertWindow(t, rec.scores(), interval+50*time.Millisecond, 3)
		for _, th := range ths {
			s := th.Stats()
			if s.Redis.RoundTrips > 3*uint64(s.Admitted) {
				t.Errorf("%d round trips for %d low calls: refused over and over, not waiting for their slots", s.Redis.RoundTrips, s.Admitted)
			}
		}
	})
}

func TestPriorityShareBadInput(t *testing.T) {
	c := redis.NewClient(&redis.Options{})
	defer c.Close()
	for _, o := range [][]Option{
		{WithPriorityShare(PriorityLow, 0)},
		{WithPriorityShare(PriorityLow, 1.5)},
		{WithPriorityShare(Priority(7), 0.5)},
		{WithPriorityShare(PriorityHigh, 0.5)}, // below normal's 1
	} {
		if _, err := New(c, "k", 10, time.Second, o...); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("New with bad shares: %v, want ErrInvalidArgument", err)
		}
	}
	th, err := New(c, "k", 10, time.Second, WithPriorityShare(PriorityLow, 0.2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ContextWithPriority(context.Background(), PriorityLow)
	if err := th.WaitN(ctx, 3); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("WaitN(3) at low priority, whose share is 2: %v, want ErrInvalidArgument", err)
	}
}
