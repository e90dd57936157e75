package throttler

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/fakeapi"
	"github.com/redis/go-redis/v9"
)

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// trackedBody records whether it was read or closed.
type trackedBody struct {
	io.Reader
	read, closed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) { b.read.Store(true); return b.Reader.Read(p) }
func (b *trackedBody) Close() error               { b.closed.Store(true); return nil }

func miniThrottler(t *testing.T, limit int, interval time.Duration, opts ...Option) *Throttler {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { c.Close() })
	return mustNew(t, c, "k", limit, interval, opts...)
}

func TestRoundTripperPassesThroughUntouched(t *testing.T) {
	th := miniThrottler(t, 5, time.Second)
	body := &trackedBody{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequest(http.MethodPost, "http://api.invalid/v1/items?x=1", body)
	req.Header.Set("Authorization", "token")
	before := req.Clone(context.Background())
	want := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}}}
	var got *http.Request
	resp, err := th.RoundTripper(rtFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return want, nil
	})).RoundTrip(req)
	if err != nil || resp != want {
		t.Fatalf("RoundTrip: got (%v, %v), want next's 429 response untouched", resp, err)
	}
	// next gets the request as the caller made it, on a context that holds
	// its write at the connection (see sendgate.go): a shallow copy, its
	// body and headers the caller's own.
	if got == nil || got.Body != req.Body || got.URL != req.URL || got.Method != req.Method || len(got.Header) != len(req.Header) ||
		got.Header.Get("Authorization") != "token" || httptrace.ContextClientTrace(got.Context()) == nil {
		t.Fatalf("next received %+v, want the caller's request on a context with the Transport's trace", got)
	}
	if body.read.Load() || body.closed.Load() {
		t.Fatal("the RoundTripper read or closed a body it handed on")
	}
	if req.Method != before.Method || req.URL.String() != before.URL.String() ||
		req.Header.Get("Authorization") != "token" || len(req.Header) != len(before.Header) {
		t.Fatalf("request modified: %s %s %v", req.Method, req.URL, req.Header)
	}
}

func TestRoundTripperCancelledClosesBody(t *testing.T) {
	th := miniThrottler(t, 1, time.Hour)
	fill(t, th)
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
		{"deadline before the next slot", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Minute)
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			body := &trackedBody{Reader: strings.NewReader("payload")}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://api.invalid/", body)
			called := false
			resp, err := th.RoundTripper(rtFunc(func(*http.Request) (*http.Response, error) {
				called = true
				return nil, nil
			})).RoundTrip(req)
			if resp != nil || !errors.Is(err, tc.want) {
				t.Fatalf("RoundTrip: got (%v, %v), want an error wrapping %v", resp, err, tc.want)
			}
			if called {
				t.Fatal("next was called although the wait failed")
			}
			if !body.closed.Load() || body.read.Load() {
				t.Fatalf("body closed=%v read=%v; want closed and never read", body.closed.Load(), body.read.Load())
			}
		})
	}
}

// TestRoundTripperHTTPClient drives a real http.Client through the
// RoundTripper to an httptest server: every request arrives once, with its
// body, and the client's *url.Error keeps errors.Is working.
func TestRoundTripperHTTPClient(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		api := fakeapi.New(1000, time.Second)
		var bodies atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if b, _ := io.ReadAll(r.Body); string(b) == "hello" {
				bodies.Add(1)
			}
			api.ServeHTTP(w, r)
		}))
		defer srv.Close()
		var rec recorder
		th := rec.watch(mustNew(t, dial(), key, 4, 100*time.Millisecond))
		client := &http.Client{Transport: th.RoundTripper(srv.Client().Transport)}
		var wg sync.WaitGroup
		for range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("hello"))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
		}
		wg.Wait()
		if got := api.Stats().Accepted; got != 12 || bodies.Load() != 12 {
			t.Fatalf("the API accepted %d requests with %d bodies, want 12 and 12", got, bodies.Load())
		}
		assertWindow(t, rec.scores(), 150*time.Millisecond, 4)

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		_, err := client.Do(req)
		var ue *url.Error
		if !errors.As(err, &ue) || !errors.Is(err, context.Canceled) {
			t.Fatalf("client.Do with a cancelled ctx: got %v, want a *url.Error wrapping context.Canceled", err)
		}
		srv.Client().CloseIdleConnections()
	})
}

func TestDoAndWrap(t *testing.T) {
	th := miniThrottler(t, 2, time.Hour)
	ctx := context.Background()
	type key struct{}
	ctx = context.WithValue(ctx, key{}, "v")
	calls := 0
	fn := func(ctx context.Context) error {
		calls++
		if ctx.Value(key{}) != "v" {
			t.Error("Do did not pass ctx through")
		}
		return errors.New("from fn")
	}
	if err := th.Do(ctx, fn); err == nil || err.Error() != "from fn" {
		t.Fatalf("Do: got %v, want fn's error", err)
	}
	lookup := Wrap(th, func(ctx context.Context, id int) (string, error) {
		calls++
		return strings.Repeat("x", id), nil
	})
	if s, err := lookup(ctx, 3); err != nil || s != "xxx" {
		t.Fatalf("wrapped call: got (%q, %v)", s, err)
	}
	// The window is full: the wrapper must not call fn.
	short, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if s, err := lookup(short, 3); s != "" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wrapped call over the limit: got (%q, %v), want zero value and DeadlineExceeded", s, err)
	}
	if err := th.Do(short, fn); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do over the limit: got %v", err)
	}
	if calls != 2 {
		t.Fatalf("fn called %d times, want 2", calls)
	}
}
