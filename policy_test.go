package throttler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// deadRedis returns a client whose server is gone: every command fails at
// once with a connection error.
func deadRedis(t *testing.T) redis.UniversalClient {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	mr.Close()
	return c
}

func TestFailClosed(t *testing.T) {
	th := mustNew(t, deadRedis(t), "k", 5, time.Second, WithLogger(quiet))
	err := th.Wait(context.Background())
	if !errors.Is(err, ErrRedis) {
		t.Fatalf("Wait with Redis down: got %v, want an error wrapping ErrRedis", err)
	}
	if _, err := th.Allow(context.Background()); !errors.Is(err, ErrRedis) {
		t.Fatalf("Allow with Redis down: got %v, want an error wrapping ErrRedis", err)
	}
	waitIdle(t, th)
}

func TestFailOpen(t *testing.T) {
	th := mustNew(t, deadRedis(t), "k", 1, time.Hour, WithLogger(quiet), WithFailurePolicy(FailOpen()))
	for i := range 5 {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatalf("Wait #%d with Redis down and FailOpen: %v", i, err)
		}
		if res, err := th.Allow(context.Background()); err != nil || !res.Allowed {
			t.Fatalf("Allow #%d with Redis down and FailOpen: (%+v, %v)", i, res, err)
		}
	}
	waitIdle(t, th)
}

// TestFallbackLocal: with Redis down, a share of 1/2 of a limit of 4 admits 2
// per window in this process, and refuses at once what cannot fit before a
// deadline.
func TestFallbackLocal(t *testing.T) {
	// The journal of local calls keeps the worker retrying Redis while they
	// matter (one window), so the window is short here.
	const interval = 2 * time.Second
	th := mustNew(t, deadRedis(t), "k", 4, interval, WithLogger(quiet), WithFailurePolicy(FallbackLocal(0.5)))
	for i := range 2 {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatalf("Wait #%d within the local share: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), interval/2)
	defer cancel()
	if err := th.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("third Wait, next local slot a window away: got %v (ctx %v), want DeadlineExceeded at once", err, ctx.Err())
	}
	if res, err := th.Allow(context.Background()); err != nil || res.Allowed || res.RetryAfter < interval/2 {
		t.Fatalf("Allow over the local share: got (%+v, %v), want refused with RetryAfter about a window", res, err)
	}
	if err := th.WaitN(context.Background(), 3); !errors.Is(err, ErrRedis) {
		t.Fatalf("WaitN(3) over the local share of 2: got %v, want ErrRedis", err)
	}
	waitIdle(t, th)
}

// TestFallbackLocalShareIgnoresClockSteps: the local share bounds calls in
// real time. A local clock (WithClock) that steps a whole window ahead while
// Redis is down must not age the share's calls out of it and admit a
// second share at once. (Simulation seed 5417: a step of 156ms admitted 9
// calls more than a share of 9.)
func TestFallbackLocalShareIgnoresClockSteps(t *testing.T) {
	const interval = 2 * time.Second
	var mu sync.Mutex
	var skew time.Duration
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return time.Now().Add(skew)
	}
	th := mustNew(t, deadRedis(t), "k", 4, interval, WithLogger(quiet), WithClock(clock),
		WithFailurePolicy(FallbackLocal(0.5)))
	for i := range 2 {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatalf("Wait #%d within the local share: %v", i, err)
		}
	}
	mu.Lock()
	skew = interval + 100*time.Millisecond // the local clock steps past the window
	mu.Unlock()
	if res, err := th.Allow(context.Background()); err != nil || res.Allowed || res.RetryAfter < interval/2 {
		t.Fatalf("Allow after the local clock stepped a window ahead: got (%+v, %v), want refused for about a window (the share is spent in real time)", res, err)
	}
	waitIdle(t, th)
}

// TestFallbackLocalEveryLimit: the local share applies to every limit, not
// only New's: 1/2 of {k}a's 8 per 2s is 4, but 1/2 of {k}b's 4 per 2s is 2,
// so only 2 calls go in a window. (The simulation found the second limit
// ignored: seed 11 held 986 calls on a limit of 440.)
func TestFallbackLocalEveryLimit(t *testing.T) {
	const interval = 2 * time.Second
	th := mustNew(t, deadRedis(t), "{k}a", 8, interval, WithLogger(quiet),
		WithLimit("{k}b", 4, interval), WithFailurePolicy(FallbackLocal(0.5)))
	for i := range 2 {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatalf("Wait #%d within the local share: %v", i, err)
		}
	}
	if res, err := th.Allow(context.Background()); err != nil || res.Allowed {
		t.Fatalf("Allow past the second limit's share of 2: got (%+v, %v), want refused", res, err)
	}
	if err := th.WaitN(context.Background(), 3); !errors.Is(err, ErrRedis) {
		t.Fatalf("WaitN(3) over the second limit's share of 2: got %v, want ErrRedis", err)
	}
	waitIdle(t, th)
}

// TestFallbackReplaysIntoRedis: calls admitted locally while Redis was down
// are counted in Redis once it answers, so the window after the outage still
// holds the limit.
func TestFallbackReplaysIntoRedis(t *testing.T) {
	mr := miniredis.RunT(t)
	addr := mr.Addr()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	th := mustNew(t, c, "k", 4, time.Hour, WithLogger(quiet), WithFailurePolicy(FallbackLocal(0.5)))
	mr.Close()
	for range 2 {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := mr.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	th.mu.Lock()
	th.fallback.degraded = time.Time{} // do not wait out the retry second
	th.mu.Unlock()
	for range 2 {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, th)
	if n := len(keyMembers(t, c, "k")); n != 4 {
		t.Fatalf("after recovery the set holds %d members, want 2 replayed + 2 admitted", n)
	}
	if res, err := th.Allow(context.Background()); err != nil || res.Allowed {
		t.Fatalf("Allow with 2 local + 2 shared calls in the window of 4: got (%+v, %v), want refused", res, err)
	}
}

// TestRedisHangs: a real redis-server stopped with SIGSTOP. Every Wait
// returns within the Redis timeout (plus scheduling slack) with ErrRedis
// under FailClosed, nothing panics, and calls succeed again once it resumes.
func TestRedisHangs(t *testing.T) {
	srv := redistest.Start(t)
	key := srv.Key(t, "hang")
	const timeout = 200 * time.Millisecond
	th := mustNew(t, srv.NewClient(), key, 100, time.Second, WithLogger(quiet), WithRedisTimeout(timeout))
	if err := th.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := th.Wait(context.Background())
			if time.Since(start) > 10*timeout {
				t.Errorf("Wait took %s with a %s Redis timeout", time.Since(start), timeout)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrRedis) {
			t.Errorf("Wait while Redis hangs: got %v, want ErrRedis", err)
		}
	}
	srv.Resume(t)
	for i := range 5 {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatalf("Wait #%d after Redis resumed: %v", i, err)
		}
	}
	waitIdle(t, th)
}

// Just back from FallbackLocal, AllowN keeps to the local share, and a call
// refused for another reason (a pause) does not use up part of it.
func TestAllowWhileSharing(t *testing.T) {
	th := miniThrottler(t, 4, time.Minute, WithFailurePolicy(FallbackLocal(0.5)))
	ctx := context.Background()
	if err := th.sampleClock(ctx, firstSamples); err != nil {
		t.Fatal(err)
	}
	th.mu.Lock()
	th.fallback.shareUntil = time.Now().Add(time.Hour)
	th.shared.pausedTill = th.clock.Server(time.Now().Add(time.Hour))
	th.mu.Unlock()
	if res, err := th.Allow(ctx); err != nil || res.Allowed {
		t.Fatalf("Allow during a pause: (%+v, %v), want refused", res, err)
	}
	th.mu.Lock()
	th.shared.pausedTill = 0
	th.mu.Unlock()
	for i, want := range []bool{true, true, false} { // the local share is 2 of 4
		res, err := th.Allow(ctx)
		if err != nil || res.Allowed != want {
			t.Fatalf("Allow %d while sharing: (%+v, %v), want allowed=%v", i, res, err, want)
		}
	}
}

// Calls admitted locally while Redis was down are written back to every
// limit that still counts them: to a longer WithLimit window even after the
// first limit's window has let them go.
func TestFallbackReplaysIntoLongerLimits(t *testing.T) {
	mr := miniredis.RunT(t)
	addr := mr.Addr()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	const short = 20 * time.Millisecond
	th := mustNew(t, c, "{q}:short", 4, short, WithLogger(quiet), WithFailurePolicy(FallbackLocal(0.5)),
		WithLimit("{q}:hour", 4, time.Hour))
	mr.Close()
	for range 2 {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Past the short window (and its buffer): those calls count in the hour only.
	time.Sleep(2*(short+th.rules.Buffer) + 10*time.Millisecond)
	if err := mr.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	th.mu.Lock()
	th.fallback.degraded = time.Time{} // do not wait out the retry second
	th.mu.Unlock()
	if err := th.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, th)
	if n := len(keyMembers(t, c, "{q}:hour")); n != 3 {
		t.Fatalf("after recovery the hour's set holds %d members, want 2 replayed + 1 admitted", n)
	}
}

// A closed client will never answer: calls FallbackLocal admits without it
// are not kept to write back, and no worker lingers retrying them.
func TestFallbackWithClosedClientHoldsNoWorker(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	c.Close()
	th := mustNew(t, c, "k", 4, time.Hour, WithLogger(quiet), WithFailurePolicy(FallbackLocal(0.5)))
	for i, want := range []bool{true, true, false} {
		res, err := th.Allow(context.Background())
		if err != nil || res.Allowed != want {
			t.Fatalf("Allow #%d with a closed client: (%+v, %v), want allowed %v", i, res, err, want)
		}
	}
	th.mu.Lock()
	running, replay := th.worker.running, len(th.owed.replay)
	th.mu.Unlock()
	if running || replay > 0 {
		t.Fatalf("after Allow with a closed client: worker running %v, %d calls kept to write back; want none", running, replay)
	}
}

// lostReplies is a go-redis hook that, while armed, lets every command
// reach the server and then fails it, as a reply lost on the way back.
type lostReplies struct{ armed atomic.Bool }

func (h *lostReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.armed.Load() {
			return errors.New("reply lost")
		}
		return err
	}
}

func (h *lostReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.armed.Load() {
			return errors.New("reply lost")
		}
		return err
	}
}

// TestFailOpenCountsFailedBatchWhenItGoes: under FailOpen, the calls of a
// round trip whose reply was lost go, and count in Redis at the time they
// went, not at the score the round trip gave them. A local clock that had
// stepped ahead since the last sample scored them in the future, where they
// would have stayed, counting at the wrong time (simulation seed 7905: 1.6s
// ahead, beyond a reserve-ahead of 7ms).
func TestFailOpenCountsFailedBatchWhenItGoes(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const step = 2 * time.Second
		c := dial()
		hook := &lostReplies{}
		c.AddHook(hook)
		var skew atomic.Int64
		clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		th := mustNew(t, c, key, 100, time.Hour, WithLogger(quiet), WithClock(clock),
			WithFailurePolicy(FailOpen()))
		ctx := context.Background()
		if err := th.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		skew.Store(int64(step))
		hook.armed.Store(true)
		if err := th.Wait(ctx); err != nil {
			t.Fatalf("Wait under FailOpen with the reply lost: %v", err)
		}
		hook.armed.Store(false)
		th.mu.Lock()
		th.fallback.degraded = time.Time{} // do not wait out the retry second
		th.mu.Unlock()
		if err := th.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, th)
		now := serverMicros(t, c)
		got := calls(t, c, key)
		if len(got) != 3 {
			t.Errorf("the key holds %d calls, want 3 (the lost reply's call counted once)", len(got))
		}
		for m, score := range got {
			if ahead := time.Duration(score-now) * time.Microsecond; ahead > step/2 {
				t.Errorf("call %q scored %s ahead of the server's clock after every call went", m, ahead)
			}
		}
	})
}
