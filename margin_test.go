package throttler

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// wideMembers reads the published margin and its end from key.
func wideMembers(t *testing.T, c redis.UniversalClient, key string) (wide, end int64) {
	t.Helper()
	v, err := c.ZMScore(context.Background(), key, redisstore.WideMember, redisstore.WideEndMember).Result()
	if err != nil {
		t.Fatal(err)
	}
	return -int64(v[0]), -int64(v[1])
}

// The margin published grows while in force and never shrinks under a
// larger one; one that has ended is replaced.
func TestWideScript(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		ctx := context.Background()
		publish := func(margin, d int64) {
			t.Helper()
			if err := redisstore.WideScript.Eval(ctx, c, []string{key}, margin, d, redisstore.WideMember, redisstore.WideEndMember).Err(); err != nil {
				t.Fatal(err)
			}
		}
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		publish(10_000, 60_000_000)
		wide, end := wideMembers(t, c, key)
		if wide != 10_000 || end < now.UnixMicro()+60_000_000 || end > now.UnixMicro()+70_000_000 {
			t.Fatalf("published 10ms for 60s at %d: wide %d, end %d", now.UnixMicro(), wide, end)
		}
		publish(5_000, 120_000_000)
		if w, e := wideMembers(t, c, key); w != 10_000 || e <= end {
			t.Fatalf("5ms for 120s over 10ms in force: wide %d end %d, want 10ms kept, the end extended past %d", w, e, end)
		}
		// An ended margin is replaced, however large.
		if err := c.ZAdd(ctx, key, redis.Z{Score: -1, Member: redisstore.WideEndMember}, redis.Z{Score: -900_000, Member: redisstore.WideMember}).Err(); err != nil {
			t.Fatal(err)
		}
		publish(3_000, 1_000_000)
		if w, e := wideMembers(t, c, key); w != 3_000 || e < now.UnixMicro() {
			t.Fatalf("3ms over an ended 900ms: wide %d end %d, want 3ms from now", w, e)
		}
	})
}

// slowReplies delays every reply of the store it wraps by the delay it
// holds: a lopsided link (requests fast, replies slow), whose round trips
// put the clock estimate off by half their length.
type slowReplies struct {
	store
	delay atomic.Int64 // nanoseconds
}

func (s *slowReplies) Reserve(ctx context.Context, a *core.Attempt) (core.Reply, error) {
	r, err := s.store.Reserve(ctx, a)
	time.Sleep(time.Duration(s.delay.Load()))
	return r, err
}

func (s *slowReplies) Now(ctx context.Context) (time.Time, error) {
	r, err := s.store.Now(ctx)
	time.Sleep(time.Duration(s.delay.Load()))
	return r, err
}

// A replica whose replies come back 60ms late (its estimate off by up to
// 30ms, past a quarter of the 50ms buffer) publishes a margin with its
// calls, and another replica on the key counts with it from its next round
// trip on.
func TestLooseEstimatePublishesAMargin(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		loose := mustNew(t, dial(), key, 100, time.Second, WithLogger(quiet))
		slow := &slowReplies{store: loose.st}
		slow.delay.Store(int64(60 * time.Millisecond))
		loose.st = slow
		tight := mustNew(t, dial(), key, 100, time.Second, WithLogger(quiet))
		ctx := context.Background()
		if err := loose.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		s := loose.Stats()
		if s.Redis.ClockError < 30*time.Millisecond || s.Redis.Margin == 0 {
			t.Fatalf("after a 60ms lopsided round trip: clock error %s, margin %s; want at least 30ms and a margin", s.Redis.ClockError, s.Redis.Margin)
		}
		wide, _ := wideMembers(t, dial(), key)
		if want := (s.Redis.ClockError - 12500*time.Microsecond).Microseconds(); wide < want {
			t.Fatalf("published margin %dµs, want at least the error past a quarter of the buffer, %dµs", wide, want)
		}
		for range 2 { // the first round trip learns of it; the second counts with it
			if err := tight.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if m := tight.Stats().Redis.Margin; m.Microseconds() < wide {
			t.Fatalf("the tight replica counts %s wider, want at least the published %dµs", m, wide)
		}
		waitIdle(t, loose)
		waitIdle(t, tight)
	})
}

// A call woken late lateBeforeSlack times in a row (here: the local clock
// steps 200ms ahead right after each of its first admissions, as an
// overloaded machine's late wake-up looks) asks for a margin wide enough
// for such a wake, publishes it, and is admitted on its next attempt.
func TestLateAgainAsksForAMargin(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		var rec recorder
		th := lateWaker(t, c, key, 5, time.Second, &rec, 200*time.Millisecond, func(n int64) bool { return n <= lateBeforeSlack })
		if err := th.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, th)
		if late := th.Stats().Sends.LateWakes; late != lateBeforeSlack || len(rec.scores()) != 1 {
			t.Fatalf("late wakes %d, admissions kept %d; want %d late wakes and 1 admission", late, len(rec.scores()), lateBeforeSlack)
		}
		wide, _ := wideMembers(t, c, key)
		if wide < 200_000 {
			t.Fatalf("published margin %dµs after %d wakes 200ms late, want at least 200ms", wide, lateBeforeSlack)
		}
		if n := len(calls(t, c, key)); n != 1 {
			t.Fatalf("%d calls in the set, want 1: the late slots must be given back", n)
		}
	})
}

// A call whose local clock stepped back after its admission waits the step
// out, and then, by the local clock and the estimate the step has not
// reached, looks on time: the runtime's clock, which never steps, shows
// it late, and it goes back to reserve again (simulation seed 53917: a
// call admitted for 339ms went at 746ms, after a step back of 407ms, and
// made 14 in a window of 12 at the API).
func TestLateByTheRuntimeClockAfterALocalStepBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var step atomic.Int64
		local := func() time.Time { return time.Now().Add(time.Duration(step.Load())) }
		c, err := newConfig("k", 10, time.Second, []Option{WithClock(local), WithBuffer(10 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		clock := core.NewClock(local())
		now := local()
		clock.Observe(now, now.Add(time.Millisecond), now) // the server's clock is the local one
		time.Sleep(time.Millisecond)
		score := clock.Server(local()) + 100_000 // admitted for 100ms on
		res := reservation{score: score}
		time.Sleep(100 * time.Millisecond)
		if _, late := c.offScore(res, &clock); late > 0 {
			t.Fatalf("on time, no step: late by %s", late)
		}
		step.Store(int64(-400 * time.Millisecond))
		time.Sleep(400 * time.Millisecond) // the local clock reads the score again
		if _, late := c.offScore(res, &clock); late < 390*time.Millisecond {
			t.Fatalf("400ms after its score, the local clock stepped back 400ms: late by %s, want about 400ms", late)
		}
	})
}
