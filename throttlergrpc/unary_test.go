package throttlergrpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/go-throttler/throttler"
)

// Two replicas, three goroutines each, call a strict fake through the
// interceptor: every call is answered, and no window of the fake's holds
// more than the limit.
func TestUnaryWaits(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		const limit, interval, calls = 10, 200 * time.Millisecond, 30
		f := &fake{quota: limit, interval: interval}
		addr := f.serve(t)
		var wg sync.WaitGroup
		errs := make(chan error, calls)
		for r := range 2 {
			// A buffer wide enough for a loaded machine under -race: the
			// fake is strict to the microsecond.
			th := newThrottler(t, dial_(), key, limit, interval, throttler.WithBuffer(100*time.Millisecond))
			client := dial(t, addr, interceptors(Throttler(th))...)
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range calls / 6 {
						if _, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
							errs <- fmt.Errorf("replica %d, goroutine %d, call %d: %w", r, g, i, err)
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		seen := f.seen()
		if len(seen) != calls {
			t.Errorf("the fake saw %d calls, want %d", len(seen), calls)
		}
		if n := codeCount(seen, codes.ResourceExhausted); n != 0 {
			t.Errorf("the fake refused %d calls, want 0", n)
		}
		if most := maxInWindow(arrivals(seen), interval); most > limit {
			t.Errorf("%d calls in one window of %s at the fake, want at most %d", most, interval, limit)
		}
	})
}

// replicas are two Throttlers on one key, each with its own Redis client
// and ClientConn to the fake: a and b.
type replicas struct {
	f        *fake
	thA, thB *throttler.Throttler
	a, b     testpb.TestServiceClient
}

func twoReplicas(t *testing.T, dial_ dialer, key string, opts ...Option) replicas {
	t.Helper()
	f := &fake{}
	addr := f.serve(t)
	r := replicas{f: f}
	r.thA = newThrottler(t, dial_(), key, 100, time.Second)
	r.thB = newThrottler(t, dial_(), key, 100, time.Second)
	r.a = dial(t, addr, interceptors(Throttler(r.thA), opts...)...)
	r.b = dial(t, addr, interceptors(Throttler(r.thB), opts...)...)
	return r
}

// lastAt is when the fake saw its last call.
func (r replicas) lastAt(t *testing.T) time.Time {
	t.Helper()
	seen := r.f.seen()
	if len(seen) == 0 {
		t.Fatal("the fake saw no call")
	}
	return seen[len(seen)-1].at
}

// A refusal pauses the other replica, or not, by its code and details:
// RESOURCE_EXHAUSTED with RetryInfo until its delay, without it for the
// back-off; UNAVAILABLE with RetryInfo until its delay, without it not at
// all.
func TestRefusalPausesEveryReplica(t *testing.T) {
	pushback := func(ms string) metadata.MD { return metadata.Pairs("grpc-retry-pushback-ms", ms) }
	cases := []struct {
		name    string
		refusal *status.Status
		pause   time.Duration // how long b's next call must wait; 0: not at all
		trailer metadata.MD   // the fake's trailer on every call
	}{
		{"RESOURCE_EXHAUSTED with a pushback", status.New(codes.ResourceExhausted, "quota"), 300 * time.Millisecond, pushback("300")},
		{"RetryInfo over a pushback", withDetails(codes.ResourceExhausted, "quota", retryInfo(300*time.Millisecond)), 300 * time.Millisecond, pushback("20")},
		{"UNAVAILABLE with a pushback", status.New(codes.Unavailable, "overloaded"), 300 * time.Millisecond, pushback("300")},
		{"UNAVAILABLE with a pushback not to retry", status.New(codes.Unavailable, "overloaded"), 0, pushback("-1")},
		{"RESOURCE_EXHAUSTED with RetryInfo", withDetails(codes.ResourceExhausted, "quota", retryInfo(300*time.Millisecond)), 300 * time.Millisecond, nil},
		{"RESOURCE_EXHAUSTED without RetryInfo", status.New(codes.ResourceExhausted, "quota"), 250 * time.Millisecond, nil},
		{"UNAVAILABLE with RetryInfo", withDetails(codes.Unavailable, "overloaded", retryInfo(300*time.Millisecond)), 300 * time.Millisecond, nil},
		{"UNAVAILABLE without RetryInfo", status.New(codes.Unavailable, "restarting"), 0, nil},
		{"RESOURCE_EXHAUSTED for a message too large", status.New(codes.ResourceExhausted, "grpc: received message larger than max (10 vs. 5)"), 0, nil},
		{"PERMISSION_DENIED with RetryInfo", withDetails(codes.PermissionDenied, "no", retryInfo(300*time.Millisecond)), 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
				r := twoReplicas(t, dial_, key, WithBackoff(250*time.Millisecond))
				r.f.setTrailer(c.trailer)
				r.f.push(c.refusal)
				_, err := r.a.UnaryCall(context.Background(), &testpb.SimpleRequest{})
				if status.Code(err) != c.refusal.Code() || isLocal(err) {
					t.Fatalf("a's call: %v, want the fake's %v", err, c.refusal.Code())
				}
				refused := r.lastAt(t)
				if _, err := r.b.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
					t.Fatalf("b's call: %v", err)
				}
				waited := r.lastAt(t).Sub(refused)
				switch {
				case c.pause > 0 && waited < c.pause-10*time.Millisecond:
					t.Errorf("b's call came %s after the refusal, want at least %s", waited, c.pause)
				case c.pause == 0 && waited > 150*time.Millisecond:
					t.Errorf("b's call came %s after the refusal, want no pause", waited)
				}
				if got, want := r.thA.Stats().Pauses > 0, c.pause > 0; got != want {
					t.Errorf("a's Stats().Pauses = %d, want paused %v", r.thA.Stats().Pauses, want)
				}
			})
		})
	}
}

// A RESOURCE_EXHAUSTED without RetryInfo soon after a back-off ended
// doubles the next, for every replica (Throttler.BackOff).
func TestBackOffDoubles(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		r := twoReplicas(t, dial_, key, WithBackoff(200*time.Millisecond))
		r.f.push(status.New(codes.ResourceExhausted, "quota"), status.New(codes.ResourceExhausted, "quota"))
		for range 2 {
			if _, err := r.a.UnaryCall(context.Background(), &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("a's call: %v, want RESOURCE_EXHAUSTED", err)
			}
		}
		second := r.lastAt(t)
		if _, err := r.b.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if waited := r.lastAt(t).Sub(second); waited < 390*time.Millisecond {
			t.Errorf("b's call came %s after the second refusal, want the doubled back-off, 400ms", waited)
		}
	})
}

// With WithRetries, a refused call is made again once the pause is over,
// and the caller sees the answer to the last attempt; other errors are
// not retried, nor is a call whose pause outlasts its deadline.
func TestRetries(t *testing.T) {
	ri := func(code codes.Code, d time.Duration) *status.Status {
		return withDetails(code, "refused", retryInfo(d))
	}
	cases := []struct {
		name     string
		script   []*status.Status
		retries  int
		timeout  time.Duration // 0: none
		want     codes.Code
		calls    int
		atLeast  time.Duration // between the first and the last call at the fake
		atMost   time.Duration // the caller's whole call, 0: unbounded
		wantLast bool          // the error is the last refusal's (not a wait's)
		trailer  string        // the fake's grpc-retry-pushback-ms on every call ("": none)
	}{
		{name: "RetryInfo, then success", script: []*status.Status{ri(codes.ResourceExhausted, 200*time.Millisecond)},
			retries: 2, want: codes.OK, calls: 2, atLeast: 200 * time.Millisecond},
		{name: "UNAVAILABLE with RetryInfo, then success", script: []*status.Status{ri(codes.Unavailable, 150*time.Millisecond)},
			retries: 1, want: codes.OK, calls: 2, atLeast: 150 * time.Millisecond},
		{name: "retries spent", script: []*status.Status{ri(codes.ResourceExhausted, 50*time.Millisecond), ri(codes.ResourceExhausted, 50*time.Millisecond), ri(codes.ResourceExhausted, 50*time.Millisecond)},
			retries: 1, want: codes.ResourceExhausted, calls: 2, atLeast: 50 * time.Millisecond, wantLast: true},
		{name: "UNAVAILABLE without RetryInfo is not retried", script: []*status.Status{status.New(codes.Unavailable, "restarting")},
			retries: 3, want: codes.Unavailable, calls: 1},
		{name: "a pushback, then success", script: []*status.Status{status.New(codes.ResourceExhausted, "quota")}, trailer: "150",
			retries: 1, want: codes.OK, calls: 2, atLeast: 150 * time.Millisecond},
		{name: "a pushback not to retry", script: []*status.Status{status.New(codes.ResourceExhausted, "quota")}, trailer: "-1",
			retries: 3, want: codes.ResourceExhausted, calls: 1, wantLast: true},
		{name: "a malformed pushback", script: []*status.Status{status.New(codes.ResourceExhausted, "quota")}, trailer: "soon",
			retries: 3, want: codes.ResourceExhausted, calls: 1, wantLast: true},
		{name: "a pause past the deadline", script: []*status.Status{ri(codes.ResourceExhausted, 5*time.Second)},
			retries: 3, timeout: 500 * time.Millisecond, want: codes.ResourceExhausted, calls: 1, atMost: 300 * time.Millisecond, wantLast: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
				r := twoReplicas(t, dial_, key, WithRetries(c.retries))
				if c.trailer != "" {
					r.f.setTrailer(metadata.Pairs("grpc-retry-pushback-ms", c.trailer))
				}
				r.f.push(c.script...)
				ctx := context.Background()
				if c.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.timeout)
					defer cancel()
				}
				start := time.Now()
				_, err := r.a.UnaryCall(ctx, &testpb.SimpleRequest{})
				took := time.Since(start)
				if status.Code(err) != c.want {
					t.Fatalf("the call: %v, want %v", err, c.want)
				}
				if c.wantLast && isLocal(err) {
					t.Errorf("the call's error %v is a wait's, want the API's last refusal", err)
				}
				seen := r.f.seen()
				if len(seen) != c.calls {
					t.Fatalf("the fake saw %d calls, want %d", len(seen), c.calls)
				}
				if gap := seen[len(seen)-1].at.Sub(seen[0].at); gap < c.atLeast-10*time.Millisecond {
					t.Errorf("the retry came %s after the first call, want at least %s", gap, c.atLeast)
				}
				if c.atMost > 0 && took > c.atMost {
					t.Errorf("the call took %s, want at most %s", took, c.atMost)
				}
			})
		})
	}
}

// A call whose earliest slot lies past its deadline fails at once,
// RESOURCE_EXHAUSTED, reserving nothing; one whose context is cancelled
// while it waits fails CANCELED, and what it reserved goes back.
func TestWaitFails(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		f := &fake{}
		th := newThrottler(t, dial_(), key, 2, 10*time.Second)
		client := dial(t, f.serve(t), interceptors(Throttler(th))...)
		for range 2 {
			if _, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		if took := time.Since(start); took > 300*time.Millisecond {
			t.Errorf("the call past its deadline took %s, want it to fail at once", took)
		}
		if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, context.DeadlineExceeded) || !isLocal(err) {
			t.Errorf("the call past its deadline: %v (code %v), want a local RESOURCE_EXHAUSTED that is context.DeadlineExceeded", err, status.Code(err))
		}
		if why, ok := throttler.RejectionOf(err); !ok || why != throttler.RejectedDeadline {
			t.Errorf("RejectionOf(%v) = %v, %v; want RejectedDeadline", err, why, ok)
		}

		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{})
		if status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
			t.Errorf("the call cancelled while it waited: %v (code %v), want CANCELED", err, status.Code(err))
		}

		if n := len(f.seen()); n != 2 {
			t.Errorf("the fake saw %d calls, want 2", n)
		}
		u, err := th.Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if u[0].Used+u[0].Reserved != 2 {
			t.Errorf("Usage: %d used and %d reserved, want the 2 calls made only", u[0].Used, u[0].Reserved)
		}
	})
}

// A call reserves the cost its context carries; WithActualCost settles a
// success at what it cost, and a refused priced call is settled at 0.
func TestCost(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		f := &fake{}
		addr := f.serve(t)
		th := newThrottler(t, dial_(), key, 100, 10*time.Second)
		used := func() int { return usedUnits(t, th) }
		plain := dial(t, addr, interceptors(Throttler(th))...)
		ctx := throttler.ContextWithCost(context.Background(), 5)
		if _, err := plain.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if got := used(); got != 5 {
			t.Errorf("after a call of cost 5: %d units in the window, want 5", got)
		}

		f.push(withDetails(codes.ResourceExhausted, "quota", retryInfo(time.Millisecond)))
		if _, err := plain.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("the refused call: %v", err)
		}
		if got := used(); got != 5 {
			t.Errorf("after a refused call of cost 5: %d units in the window, want 5 (settled at 0)", got)
		}

		actual := dial(t, addr, interceptors(Throttler(th), WithActualCost(func(_ context.Context, method string, reply any) (int, bool) {
			if method != "/grpc.testing.TestService/UnaryCall" || reply.(*testpb.SimpleResponse).GetUsername() != "ok" {
				return 0, false
			}
			return 2, true
		}))...)
		if _, err := actual.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if got := used(); got != 7 {
			t.Errorf("after a call of cost 5 settled at 2: %d units in the window, want 7", got)
		}

		_, err := plain.UnaryCall(throttler.ContextWithCost(context.Background(), 101), &testpb.SimpleRequest{})
		if status.Code(err) != codes.InvalidArgument || !errors.Is(err, throttler.ErrInvalidArgument) {
			t.Errorf("a call of cost 101 on a limit of 100: %v, want INVALID_ARGUMENT", err)
		}
		if n := len(f.seen()); n != 3 {
			t.Errorf("the fake saw %d calls, want 3", n)
		}
	})
}

// A call's tenant comes from its context, as for any wait.
func TestTenant(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		f := &fake{}
		th := newThrottler(t, dial_(), key, 100, time.Second)
		client := dial(t, f.serve(t), interceptors(Throttler(th))...)
		ctx := throttler.ContextWithTenant(context.Background(), "acme")
		for range 3 {
			if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := th.Stats().Tenants.ByTenant["acme"].Waits; got != 3 {
			t.Errorf("Stats().Tenants.ByTenant[acme].Waits = %d, want 3", got)
		}
	})
}

// A limit stated in the trailer, the header, an ErrorInfo or (with
// WithQuotaFailureLimit) a QuotaFailure lowers the Throttler's for every
// replica; one at or above it ends the lowering.
func TestLimitFromTheAPI(t *testing.T) {
	errorInfo := func(v string) *status.Status {
		return withDetails(codes.ResourceExhausted, "quota", &errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: "example.com",
			Metadata: map[string]string{"quota_limit_value": v}})
	}
	quotaFailure := func(v int64) *status.Status {
		return withDetails(codes.ResourceExhausted, "quota", &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{QuotaValue: v}}})
	}
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		f := &fake{}
		addr := f.serve(t)
		thA := newThrottler(t, dial_(), key, 100, time.Second)
		thB := newThrottler(t, dial_(), key, 100, time.Second)
		byMeta := dial(t, addr, interceptors(Throttler(thA), WithLimitMetadata("X-RateLimit-Limit"))...)
		byErrorInfo := dial(t, addr, interceptors(Throttler(thA), WithLimitMetadata("quota_limit_value"), WithMaxPause(time.Millisecond))...)
		byQuota := dial(t, addr, interceptors(Throttler(thA), WithQuotaFailureLimit(), WithMaxPause(time.Millisecond))...)
		noQuota := dial(t, addr, interceptors(Throttler(thA), WithMaxPause(time.Millisecond))...)

		// The limit in force as Redis holds it, and as b knows it after
		// a wait (its round trip reads it).
		check := func(step string, want int) {
			t.Helper()
			u, err := thA.Usage(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if u[0].Limit != want {
				t.Errorf("%s: the limit in Redis is %d, want %d", step, u[0].Limit, want)
			}
			if err := thB.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := thB.Stats().LimitNow; got != want {
				t.Errorf("%s: the other replica's limit is %d, want %d", step, got, want)
			}
		}
		call := func(c testpb.TestServiceClient) {
			t.Helper()
			time.Sleep(5 * time.Millisecond) // past the pause, at most WithMaxPause
			c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
		}
		set := func(trailer, header string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.trailer, f.header = nil, nil
			if trailer != "" {
				f.trailer = map[string][]string{"x-ratelimit-limit": {trailer}}
			}
			if header != "" {
				f.header = map[string][]string{"x-ratelimit-limit": {header}}
			}
		}

		set("60", "")
		call(byMeta)
		check("trailer 60", 60)
		set("", "40")
		call(byMeta)
		check("header 40", 40)
		set("30", "50")
		call(byMeta)
		check("header 50 and trailer 30", 30)
		set("100", "")
		call(byMeta)
		check("trailer 100, the Throttler's limit", 100)
		set("", "")

		f.push(errorInfo("70"))
		call(byErrorInfo)
		check("ErrorInfo quota_limit_value 70", 70)
		set("120", "")
		call(byMeta)
		check("trailer 120, above the Throttler's limit", 100)
		set("", "")

		f.push(quotaFailure(80))
		call(noQuota)
		check("QuotaFailure 80 without WithQuotaFailureLimit", 100)
		f.push(quotaFailure(80))
		call(byQuota)
		check("QuotaFailure 80", 80)
	})
}

// A wait's own RESOURCE_EXHAUSTED is not the API's: an interceptor above
// (chained) does not pause every replica for it.
func TestLocalRefusalIsNotShared(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		f := &fake{}
		outer := newThrottler(t, dial_(), key+":outer", 100, time.Second)
		inner := newThrottler(t, dial_(), key+":inner", 1, 10*time.Second)
		client := dial(t, f.serve(t),
			interceptors(Throttler(outer))[0], interceptors(Throttler(inner))[0])
		if _, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("the second call: %v, want the inner wait's RESOURCE_EXHAUSTED", err)
		}
		if n := outer.Stats().Pauses; n != 0 {
			t.Errorf("the outer Throttler paused %d times, want 0", n)
		}
	})
}
