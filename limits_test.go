package throttler

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// Several replicas with two limits on one call (a burst limit and a longer
// one): every window of each limit holds at most its limit.
func TestWithLimitInvariant(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		burst, total := "{"+key+"}:burst", "{"+key+"}:total"
		const (
			burstLimit, burstEvery = 4, 200 * time.Millisecond
			totalLimit, totalEvery = 10, 1500 * time.Millisecond
			buffer                 = 20 * time.Millisecond
			calls                  = 30
		)
		var rec recorder
		var ths []*Throttler
		for range 3 {
			ths = append(ths, rec.watch(mustNew(t, dial(), burst, burstLimit, burstEvery,
				WithBuffer(buffer), WithLimit(total, totalLimit, totalEvery))))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := 0
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				th := ths[i%len(ths)]
				for {
					mu.Lock()
					if admitted >= calls {
						mu.Unlock()
						return
					}
					admitted++
					mu.Unlock()
					if err := th.Wait(ctx); err != nil {
						t.Errorf("Wait: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		scores := rec.scores()
		if len(scores) != calls {
			t.Fatalf("admitted %d calls, want %d", len(scores), calls)
		}
		assertWindow(t, scores, burstEvery+buffer, burstLimit)
		assertWindow(t, scores, totalEvery+buffer, totalLimit)
		for _, th := range ths {
			waitIdle(t, th)
		}
		// Nothing but admitted calls is left in either key: no refused claim
		// stayed behind.
		c := dial()
		ours := rec.members()
		for _, k := range []string{burst, total} {
			for m := range keyMembers(t, c, k) {
				if !ours[m] {
					t.Errorf("%s holds a member %q that was never admitted", k, m)
				}
			}
		}
	})
}

// A call refused by one limit leaves no member in the other.
func TestWithLimitRefusedLeavesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		c := dial()
		fast, slow := "{"+key+"}:fast", "{"+key+"}:slow"
		th := mustNew(t, c, fast, 100, time.Second, WithLimit(slow, 3, time.Minute))
		for i := range 3 {
			if res, err := th.Allow(ctx); err != nil || !res.Allowed {
				t.Fatalf("Allow %d: (%+v, %v), want allowed", i, res, err)
			}
		}
		res, err := th.Allow(ctx)
		if err != nil || res.Allowed {
			t.Fatalf("Allow over the slow limit: (%+v, %v), want refused", res, err)
		}
		if res.RetryAfter < 50*time.Second {
			t.Errorf("RetryAfter %s, want about a minute (the slow limit's window)", res.RetryAfter)
		}
		if res.Remaining != 0 {
			t.Errorf("Remaining %d, want 0 (the slow limit is full)", res.Remaining)
		}
		for _, k := range []string{fast, slow} {
			if got := len(keyMembers(t, c, k)); got != 3 {
				t.Errorf("%s holds %d members after the refusal, want the 3 admitted", k, got)
			}
		}
		// A Wait that cannot fit before its deadline fails at once, and also
		// leaves nothing behind.
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if err := th.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait over the slow limit: %v, want DeadlineExceeded", err)
		}
		waitIdle(t, th)
		for _, k := range []string{fast, slow} {
			if got := len(keyMembers(t, c, k)); got != 3 {
				t.Errorf("%s holds %d members after the refused Wait, want 3", k, got)
			}
		}
	})
}

// The key of a limit after the first keeps its TTL when a give-back
// empties it of calls and a round trip adds one again before the next TTL
// refresh: a key emptied is deleted with its TTL, and one written anew by a
// round trip that does not refresh it had none, for ever (a Group's
// idle keys were left behind so). The keeper member (see
// redisstore.KeeperMember) keeps it from emptying.
func TestWithLimitKeyKeepsItsTTL(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		c := dial()
		fast, slow := "{"+key+"}:fast", "{"+key+"}:slow"
		th := mustNew(t, c, fast, 100, time.Second, WithLimit(slow, 100, time.Minute))
		p, err := th.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Settle(ctx, 0); err != nil { // the call's one member goes
			t.Fatal(err)
		}
		if err := th.Wait(ctx); err != nil { // within a second: no TTL refresh
			t.Fatal(err)
		}
		waitIdle(t, th)
		for _, k := range []string{fast, slow} {
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil || ttl <= 0 {
				t.Errorf("%s: PTTL %s (%v), want a TTL", k, ttl, err)
			}
			if n := len(calls(t, c, k)); n != 1 {
				t.Errorf("%s holds %d calls, want 1", k, n)
			}
		}
	})
}

func TestWithLimitRejectsBadInput(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { c.Close() })
	for _, tc := range []struct {
		name string
		key  string
		opts []Option
	}{
		{"different slots", "a", []Option{WithLimit("b", 1, time.Second)}},
		{"different tags", "{a}:x", []Option{WithLimit("{b}:x", 1, time.Second)}},
		{"same key twice", "{a}", []Option{WithLimit("{a}", 1, time.Second)}},
		{"empty key", "{a}", []Option{WithLimit("", 1, time.Second)}},
		{"limit 0", "{a}:x", []Option{WithLimit("{a}:y", 0, time.Second)}},
		{"interval 0", "{a}:x", []Option{WithLimit("{a}:y", 1, 0)}},
	} {
		if _, err := New(c, tc.key, 5, time.Second, tc.opts...); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: New: %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	th, err := New(c, "{a}:x", 5, time.Second, WithLimit("{a}:y", 2, time.Second))
	if err != nil {
		t.Fatalf("keys sharing a tag: %v", err)
	}
	if err := th.WaitN(context.Background(), 3); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("WaitN(3) with a limit of 2: %v, want ErrInvalidArgument", err)
	}
}

// LowerLimit lowers the limit for every replica; the lowering ends when set
// back to New's limit.
func TestSetLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		var (
			mu      sync.Mutex
			changed []int
		)
		var changedA []int
		a := mustNew(t, dial(), key, 10, time.Minute, WithObserver(Observer{
			LimitChanged: func(n int) { mu.Lock(); changedA = append(changedA, n); mu.Unlock() },
		}))
		b := mustNew(t, dial(), key, 10, time.Minute, WithObserver(Observer{
			LimitChanged: func(n int) { mu.Lock(); changed = append(changed, n); mu.Unlock() },
		}))
		if err := a.LowerLimit(ctx, 3, time.Hour); err != nil {
			t.Fatalf("LowerLimit: %v", err)
		}
		if err := a.LowerLimit(ctx, 3, 2*time.Hour); err != nil { // only the end moves
			t.Fatalf("LowerLimit again: %v", err)
		}
		allowed := 0
		for range 6 {
			res, err := b.Allow(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed {
				allowed++
			}
		}
		if allowed != 3 {
			t.Fatalf("b allowed %d calls under a limit lowered to 3, want 3", allowed)
		}
		if got := b.Stats().LimitNow; got != 3 {
			t.Errorf("b.Stats().Limit = %d, want 3", got)
		}
		if err := b.WaitN(ctx, 4); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("WaitN(4) under a limit lowered to 3: %v, want ErrInvalidArgument", err)
		}
		if err := a.LowerLimit(ctx, 10, time.Hour); err != nil {
			t.Fatal(err)
		}
		res, err := b.Allow(ctx)
		if err != nil || !res.Allowed {
			t.Fatalf("Allow after the lowering ended: (%+v, %v), want allowed", res, err)
		}
		mu.Lock()
		if len(changed) != 2 || changed[0] != 3 || changed[1] != 10 {
			t.Errorf("LimitChanged saw %v on the other Throttler, want [3 10]", changed)
		}
		if len(changedA) != 2 || changedA[0] != 3 || changedA[1] != 10 {
			t.Errorf("LimitChanged saw %v on the Throttler that set it, want [3 10]", changedA)
		}
		mu.Unlock()
		for _, bad := range []struct {
			n int
			d time.Duration
		}{{0, time.Second}, {3, 0}, {-1, time.Second}} {
			if err := a.LowerLimit(ctx, bad.n, bad.d); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("LowerLimit(%d, %s): %v, want ErrInvalidArgument", bad.n, bad.d, err)
			}
		}
		waitIdle(t, b)
	})
}

// Calls holding slots reserved ahead under the old limit reserve again when
// the limit is lowered: what goes after the lowering fits the lower limit.
func TestSetLimitRecallsReservedSlots(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		var rec recorder
		const every = 400 * time.Millisecond
		th := rec.watch(mustNew(t, dial(), key, 4, every, WithBuffer(0)))
		if err := th.WaitN(ctx, 4); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 4)
		for range 4 {
			go func() { done <- th.Wait(ctx) }()
		}
		// Let them reserve their slots a window ahead, then lower the limit.
		deadline := time.Now().Add(5 * time.Second)
		for len(rec.scores()) < 8 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if err := th.LowerLimit(ctx, 2, time.Hour); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		scores := rec.scores()
		if len(scores) != 8 {
			t.Fatalf("recorded %d admissions after give-backs, want 8", len(scores))
		}
		assertWindow(t, scores[4:], every, 2)
		if st := th.Stats(); st.LimitNow != 2 {
			t.Errorf("limit in force %d, want 2", st.LimitNow)
		}
		waitIdle(t, th)
	})
}

// A window of a fraction of a microsecond more than whole microseconds is
// rounded up, not down: rounded down, two calls could go a fraction of a
// microsecond less than interval apart (the simulation's seed 34 showed
// 345ns with a zero buffer).
func TestWindowRoundsUp(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	th, err := New(c, "{k}", 1, 2065319345*time.Nanosecond,
		WithBuffer(0), WithLimit("{k}2", 1, time.Millisecond+1))
	if err != nil {
		t.Fatal(err)
	}
	// Rounded up, plus the conversion slack.
	if th.rules.Wins[0].W != 2065320+core.ConversionSlack || th.rules.Wins[1].W != 1001+core.ConversionSlack {
		t.Fatalf("windows %d and %d µs, want 2065320 and 1001 plus %d", th.rules.Wins[0].W, th.rules.Wins[1].W, core.ConversionSlack)
	}
}

// WithPacing holds every replica to burst calls per interval*burst/limit
// besides the limit itself, in a key of the same Cluster slot.
func TestWithPacing(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const (
			limit, interval = 20, time.Second
			burst, buffer   = 4, 20 * time.Millisecond
			calls           = 30
		)
		var rec recorder
		var ths []*Throttler
		for range 3 {
			ths = append(ths, rec.watch(mustNew(t, dial(), key, limit, interval, WithBuffer(buffer), WithPacing(burst))))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				if err := ths[i%len(ths)].Wait(ctx); err != nil {
					t.Errorf("Wait: %v", err)
				}
			})
		}
		wg.Wait()
		scores := rec.scores()
		if len(scores) != calls {
			t.Fatalf("admitted %d calls, want %d", len(scores), calls)
		}
		assertWindow(t, scores, interval*burst/limit+buffer, burst)
		assertWindow(t, scores, interval+buffer, limit)
		for _, th := range ths {
			waitIdle(t, th)
		}
		if n := len(keyMembers(t, dial(), paceKey(key))); n == 0 {
			t.Errorf("nothing in the pace's key %q", paceKey(key))
		}
	})
}

func TestWithPacingRejectsBadInput(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		limit, burst int
		interval     time.Duration
	}{{10, 0, time.Second}, {10, -1, time.Second}, {10, 10, time.Second}, {10, 20, time.Second}, {10000, 1, time.Second}} {
		if _, err := New(c, "k", tc.limit, tc.interval, WithPacing(tc.burst)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("New(%d per %s, WithPacing(%d)): %v, want ErrInvalidArgument", tc.limit, tc.interval, tc.burst, err)
		}
	}
	for key, want := range map[string]string{"github": "{github}:pace", "{gh}:hourly": "{gh}:hourly:pace"} {
		if got := paceKey(key); got != want || redisstore.HashTag(got) != redisstore.HashTag(key) {
			t.Errorf("paceKey(%q) = %q (tag %q), want %q in the key's slot", key, got, redisstore.HashTag(got), want)
		}
	}
}
