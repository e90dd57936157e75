package throttlergrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/go-throttler/throttler"
)

// ByMethod picks by full method name, then by service; other methods go
// unthrottled.
func TestByMethod(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		f := &fake{streamMsgs: 1}
		unary := newThrottler(t, dial_(), key+":unary", 100, time.Second)
		service := newThrottler(t, dial_(), key+":service", 100, time.Second)
		client := dial(t, f.serve(t), interceptors(ByMethod(map[string]*throttler.Throttler{
			"/grpc.testing.TestService/UnaryCall": unary,
			"/grpc.testing.TestService/":          service,
		}))...)
		if _, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		s, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := drain(s); err != nil {
			t.Fatal(err)
		}
		if u, s := unary.Stats().Waits, service.Stats().Waits; u != 1 || s != 2 {
			t.Errorf("waits: %d on UnaryCall's Throttler and %d on the service's, want 1 and 2", u, s)
		}

		only := ByMethod(map[string]*throttler.Throttler{"/grpc.testing.TestService/UnaryCall": unary})
		for _, m := range []string{"/grpc.testing.TestService/EmptyCall", "/other.Service/UnaryCall", "UnaryCall", ""} {
			if th, err := only(context.Background(), m); th != nil || err != nil {
				t.Errorf("ByMethod(UnaryCall's only)(%q) = %v, %v; want unthrottled", m, th, err)
			}
		}
	})
}

// GroupRoute gives each credential its Throttler; a call without one goes
// unthrottled, and one whose Throttler cannot be made fails, unsent.
func TestGroupRoute(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		f := &fake{}
		g, err := throttler.NewGroup(dial_(), key+":", func(k string) (throttler.KeyQuota, error) {
			if k == digest("broken") {
				return throttler.KeyQuota{}, errors.New("no plan for this key")
			}
			return throttler.KeyQuota{Limit: 10, Interval: time.Second}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// The Group's Throttlers, as newThrottler's, end their
			// goroutines before the client closes.
			for _, k := range []string{"k1", "k2"} {
				th, _ := g.For(digest(k))
				for deadline := time.Now().Add(10 * time.Second); !idle(th) && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
			}
		})
		client := dial(t, f.serve(t), interceptors(GroupRoute(g, ByMetadata("X-Api-Key")))...)
		call := func(apiKey string) error {
			ctx := context.Background()
			if apiKey != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", apiKey)
			}
			_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
			return err
		}
		for _, k := range []string{"k1", "k2", "k1"} {
			if err := call(k); err != nil {
				t.Fatal(err)
			}
		}
		if err := call(""); err != nil {
			t.Fatal(err)
		}
		if n := g.Len(); n != 2 {
			t.Errorf("the Group holds %d keys, want 2", n)
		}
		for k, want := range map[string]uint64{"k1": 2, "k2": 1} {
			th, err := g.For(digest(k))
			if err != nil {
				t.Fatal(err)
			}
			if got := th.Stats().Waits; got != want {
				t.Errorf("%s's Throttler waited %d times, want %d", k, got, want)
			}
		}
		err = call("broken")
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no plan for this key") {
			t.Errorf("a call whose Throttler cannot be made: %v, want UNAVAILABLE with the limits function's error", err)
		}
		if n := len(f.seen()); n != 4 {
			t.Errorf("the fake saw %d calls, want 4", n)
		}
	})
}

// digest is ByMetadata's key for value.
func digest(value string) string {
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", value)
	k, _ := ByMetadata("x-api-key")(ctx, "")
	return k
}

// Bad arguments fail every call, unsent, with INVALID_ARGUMENT and an
// error wrapping throttler.ErrInvalidArgument that names them; nothing
// panics.
func TestBadArguments(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		th := newThrottler(t, dial_(), key, 100, time.Second)
		f := &fake{}
		addr := f.serve(t)
		cases := []struct {
			name  string
			route Route
			opts  []Option
			want  string // in the error
		}{
			{"nil Route", nil, nil, "nil Route"},
			{"Throttler(nil)", Throttler(nil), nil, "Throttler: the Throttler is nil"},
			{"Throttler(zero)", Throttler(&throttler.Throttler{}), nil, "Throttler: the Throttler is nil"},
			{"ByMethod with a nil Throttler", ByMethod(map[string]*throttler.Throttler{"/grpc.testing.TestService/": nil}), nil, `ByMethod: the Throttler for "/grpc.testing.TestService/"`},
			{"GroupRoute(nil, nil)", GroupRoute(nil, nil), nil, "GroupRoute: the Group or keyOf is nil"},
			{"WithRetries(-1)", Throttler(th), []Option{WithRetries(-1)}, "WithRetries(-1)"},
			{"WithMaxPause(0)", Throttler(th), []Option{WithMaxPause(0)}, "WithMaxPause(0s)"},
			{"WithBackoff(-1s)", Throttler(th), []Option{WithBackoff(-time.Second)}, "WithBackoff(-1s)"},
			{"WithLimitMetadata(\"\")", Throttler(th), []Option{WithLimitMetadata(" ")}, "WithLimitMetadata"},
			{"WithLimitFor(0)", Throttler(th), []Option{WithLimitFor(0)}, "WithLimitFor(0s)"},
			{"WithActualCost(nil)", Throttler(th), []Option{WithActualCost(nil)}, "WithActualCost: actual is nil"},
			{"a nil Option", Throttler(th), []Option{WithRetries(1), nil}, "Option 1 is nil"},
		}
		for _, c := range cases {
			client := dial(t, addr, interceptors(c.route, c.opts...)...)
			check := func(face string, err error) {
				t.Helper()
				if status.Code(err) != codes.InvalidArgument || !errors.Is(err, throttler.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s, %s: %v (code %v), want INVALID_ARGUMENT wrapping ErrInvalidArgument, saying %q", c.name, face, err, status.Code(err), c.want)
				}
			}
			_, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
			check("unary", err)
			_, err = client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
			check("stream", err)
		}
		if n := len(f.seen()); n != 0 {
			t.Errorf("the fake saw %d calls, want none", n)
		}
	})
}

// The error of a failed wait reads as a gRPC status and as the
// throttler's error both.
func TestWaitErrorCodes(t *testing.T) {
	cases := []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("x: %w", throttler.ErrRedis), codes.Unavailable},
		{fmt.Errorf("x: %w", throttler.ErrInvalidArgument), codes.InvalidArgument},
		{fmt.Errorf("x: %w", context.Canceled), codes.Canceled},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("x: %w and %w", throttler.ErrMaxWait, context.DeadlineExceeded), codes.ResourceExhausted},
		{errors.New("x"), codes.Unknown},
	}
	for _, c := range cases {
		err := waitError(c.err)
		if got := status.Code(err); got != c.want {
			t.Errorf("waitError(%v): code %v, want %v", c.err, got, c.want)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("waitError(%v) does not wrap it", c.err)
		}
		if st, ok := status.FromError(err); !ok || st.Message() != err.Error() {
			t.Errorf("status.FromError(waitError(%v)) = %v, %v", c.err, st, ok)
		}
	}
}
