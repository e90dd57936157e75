package throttler

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

func TestNewRejectsBadInput(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: New does no I/O
	defer c.Close()
	tests := []struct {
		name     string
		client   redis.UniversalClient
		key      string
		limit    int
		interval time.Duration
		opts     []Option
	}{
		{"nil client", nil, "k", 1, time.Second, nil},
		{"empty key", c, "", 1, time.Second, nil},
		{"zero limit", c, "k", 0, time.Second, nil},
		{"negative limit", c, "k", -5, time.Second, nil},
		{"zero interval", c, "k", 1, 0, nil},
		{"negative interval", c, "k", 1, -time.Second, nil},
		{"sub-millisecond interval", c, "k", 1, time.Microsecond, nil},
		{"interval over a year", c, "k", 1, 400 * 24 * time.Hour, nil},
		{"negative buffer", c, "k", 1, time.Second, []Option{WithBuffer(-time.Millisecond)}},
		{"nil option", c, "k", 1, time.Second, []Option{nil}},
		{"nil clock", c, "k", 1, time.Second, []Option{WithClock(nil)}},
		{"nil logger", c, "k", 1, time.Second, []Option{WithLogger(nil)}},
		{"zero redis timeout", c, "k", 1, time.Second, []Option{WithRedisTimeout(0)}},
		{"negative reserve-ahead", c, "k", 1, time.Second, []Option{WithReserveAhead(-1)}},
		{"reserve-ahead over cap", c, "k", 1, time.Second, []Option{WithReserveAhead(time.Hour)}},
		{"fallback share zero", c, "k", 1, time.Second, []Option{WithFailurePolicy(FallbackLocal(0))}},
		{"fallback share above one", c, "k", 1, time.Second, []Option{WithFailurePolicy(FallbackLocal(1.5))}},
		{"fallback share NaN", c, "k", 1, time.Second, []Option{WithFailurePolicy(FallbackLocal(nan()))}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th, err := New(tc.client, tc.key, tc.limit, tc.interval, tc.opts...)
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("New(%v, %q, %d, %s): got (%v, %v), want an error wrapping ErrInvalidArgument",
					tc.client != nil, tc.key, tc.limit, tc.interval, th, err)
			}
		})
	}
}

func nan() float64 { var z float64; return z / z }

func TestCallsRejectBadN(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	th := mustNew(t, c, "k", 3, time.Second)
	ctx := context.Background()
	for _, n := range []int{0, -1, 4, 1 << 30} {
		if err := th.WaitN(ctx, n); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("WaitN(%d): got %v, want ErrInvalidArgument", n, err)
		}
		if _, err := th.AllowN(ctx, n); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("AllowN(%d): got %v, want ErrInvalidArgument", n, err)
		}
	}
	if n := len(keyMembers(t, c, "k")); n != 0 {
		t.Fatalf("bad calls left %d members", n)
	}
}

// TestInvariantReplicas is the core guarantee: several Throttlers with their
// own clients (as replicas would have) on one key, many goroutines, weighted
// calls and abandoned contexts mixed in. Every admission is recorded with
// its server-time score; no window of interval+buffer may hold more than
// limit, every call either is admitted or returns an error, and nothing but
// admitted calls is left in the set.
func TestInvariantReplicas(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const (
			limit      = 10
			interval   = 100 * time.Millisecond
			replicas   = 3
			goroutines = 6
			calls      = 5
		)
		var rec recorder
		ths := make([]*Throttler, replicas)
		for i := range ths {
			ths[i] = rec.watch(mustNew(t, dial(), key, limit, interval))
		}
		var admitted, abandoned, weight atomic.Int64
		var wg sync.WaitGroup
		for r := range replicas {
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(r), uint64(g)))
					for range calls {
						n := 1 + rng.IntN(3)
						ctx, cancel := context.Background(), context.CancelFunc(func() {})
						if rng.IntN(4) == 0 { // a quarter of the calls give up early
							ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(60))*time.Millisecond)
						}
						err := ths[r].WaitN(ctx, n)
						cancel()
						switch {
						case err == nil:
							admitted.Add(1)
							weight.Add(int64(n))
						case errors.Is(err, context.DeadlineExceeded):
							abandoned.Add(1)
						default:
							t.Errorf("WaitN(%d): unexpected error %v", n, err)
						}
					}
				}()
			}
		}
		wg.Wait()
		for _, th := range ths {
			waitIdle(t, th)
		}
		scores := rec.scores()
		if int64(len(scores)) != weight.Load() {
			t.Fatalf("recorded %d admitted units, callers saw %d", len(scores), weight.Load())
		}
		if got := admitted.Load() + abandoned.Load(); got != replicas*goroutines*calls {
			t.Fatalf("%d calls accounted for, want %d", got, replicas*goroutines*calls)
		}
		assertWindow(t, scores, interval+50*time.Millisecond, limit)
		ours := rec.members()
		for m := range keyMembers(t, dial(), key) {
			if !ours[m] {
				t.Errorf("member %x is in the set but belongs to no admitted call", m)
			}
		}
		t.Logf("admitted %d calls (%d units), %d abandoned", admitted.Load(), weight.Load(), abandoned.Load())
	})
}

// TestInvariantSkewedClocks: three replicas whose local clocks are 2s ahead,
// 2s behind and right. The limit holds in server time, and every call ran
// at (not seconds away from) the server time it was counted at.
func TestInvariantSkewedClocks(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const (
			limit    = 5
			interval = 100 * time.Millisecond
		)
		type run struct{ score, ran int64 }
		var mu sync.Mutex
		var runs []run
		var rec recorder
		var wg sync.WaitGroup
		for _, skew := range []time.Duration{2 * time.Second, -2 * time.Second, 0} {
			clock := func() time.Time { return time.Now().Add(skew) }
			th := rec.watch(mustNew(t, dial(), key, limit, interval, WithClock(clock)))
			score := make(chan int64, 100)
			inner := th.hooks.onAdmit
			th.hooks.onAdmit = func(s int64, m []string) { inner(s, m); score <- s }
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 4 {
						if err := th.Wait(context.Background()); err != nil {
							t.Errorf("Wait with clock skewed %s: %v", skew, err)
							return
						}
						ran := time.Now().UnixMicro()
						mu.Lock()
						runs = append(runs, run{score: <-score, ran: ran})
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		assertWindow(t, rec.scores(), interval+50*time.Millisecond, limit)
		// Pairing each return with "a" score of the same Throttler is loose
		// (goroutines interleave), so the bound is loose too: far below the
		// 2s a misread clock would cause.
		for _, r := range runs {
			if d := time.Duration(r.ran-r.score) * time.Microsecond; d < -500*time.Millisecond || d > 500*time.Millisecond {
				t.Errorf("a call ran %s away from the server time it was counted at", d)
			}
		}
	})
}

// fill admits limit calls on a long interval, so the window stays full for
// the rest of the test.
func fill(t *testing.T, th *Throttler) {
	t.Helper()
	for i := range th.Limit() {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatalf("filling call %d: %v", i, err)
		}
	}
}

func TestCancelGivesBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		var rec recorder
		// A long reserve-ahead, so the waiter holds a future slot in Redis
		// while it sleeps.
		th := rec.watch(mustNew(t, c, key, 3, 10*time.Second, WithReserveAhead(time.Minute)))
		fill(t, th)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- th.Wait(ctx) }()
		// Wait until the waiter holds its future slot, then cancel.
		for len(rec.scores()) < 4 {
			time.Sleep(time.Millisecond)
		}
		if n := len(keyMembers(t, c, key)); n != 4 {
			t.Fatalf("before cancel: %d members, want 3 admitted + 1 reserved", n)
		}
		cancel()
		err := <-done
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel: got %v, want context.Canceled", err)
		}
		if n := len(keyMembers(t, c, key)); n != 3 {
			t.Fatalf("after cancel: %d members, want the 3 admitted only", n)
		}
	})
}

func TestDeadlineFailsFast(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		filler := mustNew(t, c, key, 3, 10*time.Second)
		fill(t, filler)
		// A fresh Throttler knows nothing of the window: its first attempt
		// is rejected, then it learns the next slot is ~10s away.
		for _, th := range []*Throttler{mustNew(t, dial(), key, 3, 10*time.Second), filler} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := th.Wait(ctx)
			returnedEarly := ctx.Err() == nil
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait: got %v, want an error wrapping context.DeadlineExceeded", err)
			}
			if !returnedEarly {
				t.Fatalf("Wait slept into its deadline; it should refuse at once")
			}
			// The refused claim goes back, written for sure, with the
			// worker's next round trip; its caller does not remove it (see
			// waiter.requeueLocked).
			waitIdle(t, th)
			if n := len(keyMembers(t, c, key)); n != 3 {
				t.Fatalf("after the refused wait: %d members, want 3", n)
			}
		}
	})
}

func TestAlreadyCancelled(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	th := mustNew(t, c, "k", 3, time.Second)
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("shutting down")
	cancel(cause)
	err := th.Wait(ctx)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("Wait on a cancelled ctx: got %v, want both context.Canceled and the cause", err)
	}
}

// TestCrashedReplicaBound: a killed process leaves members behind: at worst,
// slots it held reserve-ahead into the future. Under steady traffic the
// survivors get full capacity back once those members' time plus interval
// plus buffer has passed, and never exceed the limit meanwhile.
func TestCrashedReplicaBound(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const (
			limit    = 4
			interval = 150 * time.Millisecond
			ahead    = 100 * time.Millisecond
		)
		c := dial()
		// The dead process held every slot, ahead into the future.
		dead := serverMicros(t, c) + ahead.Microseconds()
		var zs []redis.Z
		for i := range limit {
			zs = append(zs, redis.Z{Score: float64(dead), Member: []byte{'d', 'e', 'a', 'd', byte(i)}})
		}
		if err := c.ZAdd(context.Background(), key, zs...).Err(); err != nil {
			t.Fatal(err)
		}
		w := interval // buffer 0
		bound := dead + w.Microseconds()

		var rec recorder
		th := rec.watch(mustNew(t, dial(), key, limit, interval, WithBuffer(0), WithReserveAhead(ahead)))
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := th.Wait(context.Background()); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		for {
			if s := rec.scores(); len(s) > 0 && s[len(s)-1] >= bound+w.Microseconds() {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		scores := rec.scores()
		all := append(append([]int64(nil), scores...), dead, dead, dead, dead)
		assertWindow(t, all, w, limit)
		inBound := 0
		for _, s := range scores {
			if s >= bound && s < bound+w.Microseconds() {
				inBound++
			}
		}
		if inBound != limit {
			t.Fatalf("in the first window after the crash bound the survivors got %d calls, want the full %d", inBound, limit)
		}
	})
}

// TestSeedPendingMemberIgnored: a seed-design client that died leaves a
// member a year ahead. It counts in no window, and is trimmed.
func TestSeedPendingMemberIgnored(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		year := serverMicros(t, c) + (365 * 24 * time.Hour).Microseconds()
		if err := c.ZAdd(context.Background(), key, redis.Z{Score: float64(year), Member: "seed-pending"}).Err(); err != nil {
			t.Fatal(err)
		}
		var rec recorder
		th := rec.watch(mustNew(t, dial(), key, 2, 20*time.Millisecond, WithBuffer(0)))
		for range 10 {
			if err := th.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		waitIdle(t, th)
		assertWindow(t, rec.scores(), 20*time.Millisecond, 2)
		if _, ok := keyMembers(t, c, key)["seed-pending"]; ok {
			t.Fatal("a member a year ahead is still in the set after 10 admissions")
		}
	})
}

func TestAllow(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		var rec recorder
		th := rec.watch(mustNew(t, c, key, 3, 10*time.Second))
		ctx := context.Background()
		for i, want := range []int{2, 1, 0} {
			res, err := th.Allow(ctx)
			if err != nil || !res.Allowed || res.Remaining != want {
				t.Fatalf("Allow #%d: got (%+v, %v), want allowed with %d remaining", i+1, res, err, want)
			}
		}
		res, err := th.Allow(ctx)
		if err != nil || res.Allowed {
			t.Fatalf("Allow over the limit: got (%+v, %v), want refused", res, err)
		}
		if res.RetryAfter < 9*time.Second || res.RetryAfter > 11*time.Second {
			t.Fatalf("RetryAfter %s, want about the 10s interval", res.RetryAfter)
		}
		if n := len(keyMembers(t, c, key)); n != 3 {
			t.Fatalf("refused Allow left %d members, want 3", n)
		}
		if res, err := th.AllowN(ctx, 2); err != nil || res.Allowed {
			t.Fatalf("AllowN(2) with no room: got (%+v, %v)", res, err)
		}
	})
}

// TestLateWakeReReserves: a call woken more than half the buffer after its
// slot (here: the local clock steps 200ms forward right after admission, as
// an overloaded machine's late wake-up looks) gives its slot back and
// reserves again instead of going late.
func TestLateWakeReReserves(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		var rec recorder
		th := lateWaker(t, c, key, 5, time.Second, &rec, 200*time.Millisecond, func(n int64) bool { return n == 1 })
		if err := th.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, th)
		th.mu.Lock()
		late := th.stats.lateWakes.Load()
		th.mu.Unlock()
		if late != 1 || len(rec.scores()) != 1 {
			t.Fatalf("late wakes %d, admissions kept %d; want 1 late wake and 1 admission (the first was given back)", late, len(rec.scores()))
		}
		if n := len(keyMembers(t, c, key)); n != 1 {
			t.Fatalf("%d members in the set, want 1: the late slot must be given back", n)
		}
	})
}

// A call woken late that held the last slot of its window takes a slot at
// once when it reserves again, not one a window away: the slot it gave
// back is free again (core.Known.Free). Found by the bench's keys
// scenario: the tenth call of a key at 10 a minute, woken late on a loaded
// machine, waited 58 seconds, for its own given-back slot still counted in
// the free slots its process knew.
func TestLateWakeAtTheLimitTakesItsSlotAgain(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		var rec recorder
		// The second call wakes 200ms late.
		th := lateWaker(t, c, key, 2, time.Minute, &rec, 200*time.Millisecond, func(n int64) bool { return n == 2 })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range 2 {
			if err := th.Wait(ctx); err != nil {
				t.Fatalf("Wait %d: %v (a slot a minute away is past the 10s deadline)", i+1, err)
			}
		}
		waitIdle(t, th)
		scores := rec.scores()
		if late := th.Stats().Sends.LateWakes; late != 1 || len(scores) != 2 {
			t.Fatalf("late wakes %d, admissions kept %d; want 1 late wake and 2 admissions", late, len(scores))
		}
		if gap := time.Duration(scores[1]-scores[0]) * time.Microsecond; gap > 5*time.Second {
			t.Fatalf("the late call was admitted again %s after the first, want at once", gap)
		}
		if n := len(calls(t, c, key)); n != 2 {
			t.Fatalf("%d calls in the set, want 2: the late slot must be given back", n)
		}
	})
}

// FuzzNew: any parameters give either a Throttler or an error wrapping
// ErrInvalidArgument, never a panic; a Throttler's WaitN and AllowN reject
// n out of range the same way.
func FuzzNew(f *testing.F) {
	f.Add("k", 10, int64(time.Second), int64(50*time.Millisecond), int64(time.Second), 0.5, 3)
	f.Add("", 0, int64(0), int64(-1), int64(-1), 0.0, 0)
	f.Add("{tag}:x", 1<<30, int64(time.Millisecond), int64(0), int64(10*time.Minute), 1.0, -1)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	f.Cleanup(func() { c.Close() })
	f.Fuzz(func(t *testing.T, key string, limit int, interval, buffer, ahead int64, share float64, n int) {
		th, err := New(c, key, limit, time.Duration(interval),
			WithBuffer(time.Duration(buffer)), WithReserveAhead(time.Duration(ahead)),
			WithFailurePolicy(FallbackLocal(share)))
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("New: %v does not wrap ErrInvalidArgument", err)
			}
			return
		}
		if n < 1 || n > th.Limit() {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := th.WaitN(ctx, n); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("WaitN(%d) with limit %d: %v", n, th.Limit(), err)
			}
			if _, err := th.AllowN(ctx, n); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("AllowN(%d) with limit %d: %v", n, th.Limit(), err)
			}
		}
	})
}
