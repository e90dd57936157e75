package throttler

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-throttler/throttler/counters"
)

// okBody answers every request 200 with a small body.
var okBody = rtFunc(func(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"ok":true}`)), Request: r}, nil
})

// send makes one request through tr with ctx and reads its body to the end.
func send(t *testing.T, tr http.RoundTripper, ctx context.Context, body io.Reader) (*http.Response, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://api.invalid/v1/chat", body)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// A Cost without Estimate reserves what the request's context carries;
// with Estimate, Estimate decides; a request carrying no cost, or one
// below 1, fails with ErrInvalidArgument and its body is closed.
func TestContextWithCost(t *testing.T) {
	if n, ok := CostFromContext(context.Background()); ok || n != 0 {
		t.Fatalf("CostFromContext(Background) = %d, %v; want 0, false", n, ok)
	}
	if n, ok := CostFromContext(ContextWithCost(context.Background(), 7)); !ok || n != 7 {
		t.Fatalf("CostFromContext(ContextWithCost(7)) = %d, %v; want 7, true", n, ok)
	}

	th := miniThrottler(t, 100, time.Hour, WithLogger(quiet))
	tr := &Transport{Base: okBody, Route: th.Route(), Cost: &Cost{}}
	if _, err := send(t, tr, ContextWithCost(context.Background(), 7), nil); err != nil {
		t.Fatal(err)
	}
	if s := th.Stats(); s.Admitted != 7 {
		t.Fatalf("a request carrying 7: %d units admitted, want 7", s.Admitted)
	}

	for _, ctx := range []context.Context{context.Background(), ContextWithCost(context.Background(), 0), ContextWithCost(context.Background(), 101)} {
		body := &trackedBody{Reader: strings.NewReader("prompt")}
		_, err := send(t, tr, ctx, body)
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("a request carrying no cost, or one out of range: %v, want ErrInvalidArgument", err)
		}
		if !body.closed.Load() || body.read.Load() {
			t.Fatalf("refused request: body closed %v, read %v; want closed unread", body.closed.Load(), body.read.Load())
		}
	}

	tr = &Transport{Base: okBody, Route: th.Route(), Cost: &Cost{Estimate: func(*http.Request) int { return 3 }}}
	if _, err := send(t, tr, ContextWithCost(context.Background(), 7), nil); err != nil {
		t.Fatal(err)
	}
	if s := th.Stats(); s.Admitted != 7+3 {
		t.Fatalf("with Estimate set, a request carrying 7 reserved %d units, want Estimate's 3", s.Admitted-7)
	}
	waitIdle(t, th)
}

// A 429 settles at 0 without asking Actual: the refused call holds
// nothing once its body is read; a 200 asks Actual.
func TestCostRefusalSettlesZero(t *testing.T) {
	th := miniThrottler(t, 100, time.Hour, WithLogger(quiet))
	var status atomic.Int32
	base := rtFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: int(status.Load()), Header: http.Header{},
			Body: io.NopCloser(strings.NewReader(`{"usage":{"total_tokens":4}}`)), Request: r}, nil
	})
	var asked atomic.Int32
	tr := &Transport{Base: base, Route: th.Route(), Cost: &Cost{
		Estimate: func(*http.Request) int { return 10 },
		Actual:   func(*http.Response, []byte) (int, bool) { asked.Add(1); return 4, true },
	}}
	status.Store(http.StatusTooManyRequests)
	if _, err := send(t, tr, context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if s := th.Stats(); asked.Load() != 0 || s.Costs.Settled != 1 || s.Costs.Returned != 10 {
		t.Fatalf("a 429: Actual asked %d times, %d settled, %d units returned; want not asked, settled at 0 (10 returned)", asked.Load(), s.Costs.Settled, s.Costs.Returned)
	}
	status.Store(http.StatusOK)
	if _, err := send(t, tr, context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if s := th.Stats(); asked.Load() != 1 || s.Costs.Returned != 10+6 {
		t.Fatalf("a 200: Actual asked %d times, %d units returned in all; want asked once, 6 more returned", asked.Load(), s.Costs.Returned)
	}
	waitIdle(t, th)
}

// A refusal settles at 0 by its verdict, whatever its status: a 503 with
// Retry-After under the default reading and under OpenAI(), a GitHub 403
// for a secondary limit, Stripe's lock_timeout (RetryCall); a response
// read as Proceed asks Actual, and so
// does a 503 without Retry-After (retried alone, see Transport, but it may
// have counted) and Anthropic's 529 (overloaded): Anthropic
// does not say whether an overloaded call counts against the limits, so its
// estimate is not given back on a guess.
func TestCostRefusalByVerdict(t *testing.T) {
	for _, tt := range []struct {
		name     string
		counters counters.Counters
		status   int
		header   http.Header
		body     string
		refused  bool
	}{
		{"503 with Retry-After, default reading", nil, http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}, "", true},
		{"503 with Retry-After, counters.OpenAI()", counters.OpenAI(), http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}, "", true},
		{"403 secondary limit, counters.GitHub()", counters.GitHub(), http.StatusForbidden, http.Header{}, `{"message":"You have exceeded a secondary rate limit."}`, true},
		{"429 lock_timeout, counters.Stripe()", counters.Stripe(), http.StatusTooManyRequests, http.Header{}, `{"error":{"code":"lock_timeout","type":"invalid_request_error"}}`, true},
		{"429 without Retry-After, default reading", nil, http.StatusTooManyRequests, http.Header{}, "", true},
		{"503 without Retry-After, default reading", nil, http.StatusServiceUnavailable, http.Header{}, "", false},
		{"529 overloaded, counters.Anthropic()", counters.Anthropic(), 529, http.Header{}, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			th := miniThrottler(t, 100, time.Hour, WithLogger(quiet))
			base := rtFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: tt.status, Header: tt.header.Clone(), Body: io.NopCloser(strings.NewReader(tt.body)), Request: r}, nil
			})
			var asked atomic.Int32
			tr := &Transport{Base: base, Route: th.Route(), Counters: tt.counters, Cost: &Cost{
				Estimate: func(*http.Request) int { return 10 },
				Actual:   func(*http.Response, []byte) (int, bool) { asked.Add(1); return 4, true },
			}}
			if _, err := send(t, tr, context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			s := th.Stats()
			switch {
			case tt.refused && (asked.Load() != 0 || s.Costs.Returned != 10):
				t.Errorf("Actual asked %d times, %d units returned; want a refusal settled at 0 (10 returned) without asking Actual", asked.Load(), s.Costs.Returned)
			case !tt.refused && (asked.Load() != 1 || s.Costs.Returned != 6):
				t.Errorf("Actual asked %d times, %d units returned; want no refusal: Actual asked once, settled at its 4 (6 returned)", asked.Load(), s.Costs.Returned)
			}
			waitIdle(t, th)
		})
	}
}

// A call refused with a 503 and Retry-After, then retried and answered,
// holds one estimate, the answered attempt's, not two.
func TestCostRetried503CountsOnce(t *testing.T) {
	th := miniThrottler(t, 100, time.Hour, WithLogger(quiet))
	var sends atomic.Int32
	base := rtFunc(func(r *http.Request) (*http.Response, error) {
		if sends.Add(1) == 1 {
			return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"1"}}, Body: http.NoBody, Request: r}, nil
		}
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	tr := &Transport{Base: base, Route: th.Route(), Retries: 1, Cost: &Cost{Estimate: func(*http.Request) int { return 10 }}}
	resp, err := send(t, tr, context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := th.Stats()
	if resp.StatusCode != http.StatusOK || sends.Load() != 2 || s.Admitted-s.Costs.Returned != 10 {
		t.Fatalf("status %d after %d sends; %d units admitted, %d returned: %d held, want 200 after 2 sends and 10 held (the refused attempt settled at 0)",
			resp.StatusCode, sends.Load(), s.Admitted, s.Costs.Returned, s.Admitted-s.Costs.Returned)
	}
	waitIdle(t, th)
}

// A Transport with Cost takes the refusals Counters reads (it pauses),
// and follows no counter (its limit stays New's).
func TestCostTransportFollowsNoCounter(t *testing.T) {
	th := miniThrottler(t, 100, time.Hour, WithLogger(quiet))
	var refuse atomic.Bool
	base := rtFunc(func(r *http.Request) (*http.Response, error) {
		h := http.Header{}
		h.Set("X-Ratelimit-Remaining-Requests", "1")
		h.Set("X-Ratelimit-Reset-Requests", "10s")
		status := http.StatusOK
		if refuse.Load() {
			status = http.StatusTooManyRequests
			h.Set("X-Ratelimit-Remaining-Tokens", "0")
			h.Set("X-Ratelimit-Reset-Tokens", "300ms")
		}
		return &http.Response{StatusCode: status, Header: h, Body: http.NoBody, Request: r}, nil
	})
	tr := &Transport{Base: base, Route: th.Route(), Counters: counters.OpenAI(), Cost: &Cost{Estimate: func(*http.Request) int { return 5 }}}
	for range 3 {
		if _, err := send(t, tr, context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if s := th.Stats(); s.LimitNow != 100 || s.Pauses != 0 {
		t.Fatalf("after 3 responses stating 1 request left: limit %d, %d pauses; want New's 100, none", s.LimitNow, s.Pauses)
	}
	refuse.Store(true)
	if _, err := send(t, tr, context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if s := th.Stats(); s.Pauses != 1 || s.PausedUntil.IsZero() {
		t.Fatalf("after a 429 with tokens at 0: %d pauses (until %v), want the Throttler paused", s.Pauses, s.PausedUntil)
	}
	waitIdle(t, th)
}

// Where Retries goes with nested Transports (tokens with Cost over
// requests, both reading OpenAI's refusals), measured against an API
// that refuses every request with tokens at 0 and a reset 100ms away:
//
//   - on the outer Transport, each send is admitted anew on both limits,
//     after the pause, and a refused attempt gives its tokens back:
//     3 sends, 3 token admissions, nothing left in the token window;
//   - on the inner one, the 3 sends go under the one token admission,
//     the last at least two pauses (200ms) after it;
//   - on both, the sends multiply: 3 x 3 = 9 for one call.
func TestNestedRetriesPlacement(t *testing.T) {
	type outcome struct {
		sends, tokenAdmissions int
		lastAfterFirst         time.Duration // last send's arrival, after the first token admission
		held                   int           // token units the window holds once the call is over
	}
	run := func(t *testing.T, outer, inner int) outcome {
		var mu sync.Mutex
		var arrivals []time.Time
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			arrivals = append(arrivals, time.Now())
			mu.Unlock()
			w.Header().Set("X-Ratelimit-Remaining-Tokens", "0")
			w.Header().Set("X-Ratelimit-Reset-Tokens", "100ms")
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		defer api.Close()
		defer api.Client().CloseIdleConnections()
		tokens := miniThrottler(t, 1000, time.Minute, WithLogger(quiet))
		requests := miniThrottler(t, 100, time.Minute, WithLogger(quiet))
		var admitted []int64 // token admissions' scores, server µs
		held := 0
		tokens.hooks.onAdmit = func(score int64, members []string) { admitted = append(admitted, score); held += len(members) }
		tokens.hooks.onRelease = func(members []string) { held -= len(members) }
		client := &http.Client{Transport: &Transport{
			Route: tokens.Route(), Counters: counters.OpenAI(), Retries: outer,
			Cost: &Cost{Estimate: func(*http.Request) int { return 50 }},
			Base: &Transport{Route: requests.Route(), Counters: counters.OpenAI(), Retries: inner, Base: api.Client().Transport},
		}}
		resp, err := client.Get(api.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, want the last 429", resp.StatusCode)
		}
		waitIdle(t, tokens)
		waitIdle(t, requests)
		// A send whose connection came past its slot's allowance (a
		// loaded machine) takes a new slot and gives the first back: one
		// admission per send, counted twice by the hook.
		reslotted := int(tokens.Stats().Sends.Reslotted)
		mu.Lock()
		defer mu.Unlock()
		tokens.mu.Lock()
		defer tokens.mu.Unlock()
		if len(arrivals) == 0 || len(admitted) == 0 {
			t.Fatalf("%d sends, %d token admissions: want at least one of each", len(arrivals), len(admitted))
		}
		return outcome{len(arrivals), len(admitted) - reslotted, arrivals[len(arrivals)-1].Sub(time.UnixMicro(admitted[0])), held}
	}

	got := run(t, 2, 0)
	t.Logf("Retries on the outer Transport: %+v", got)
	if got.sends != 3 || got.tokenAdmissions != 3 || got.held != 0 {
		t.Errorf("Retries on the outer Transport: %d sends, %d token admissions, %d token units held after; want 3, 3 (one per send), 0", got.sends, got.tokenAdmissions, got.held)
	}
	got = run(t, 0, 2)
	t.Logf("Retries on the inner Transport: %+v", got)
	if got.sends != 3 || got.tokenAdmissions != 1 || got.lastAfterFirst < 200*time.Millisecond {
		t.Errorf("Retries on the inner Transport: %d sends, %d token admissions, the last send %v after it; want 3 sends under 1 admission, the last at least 200ms after it", got.sends, got.tokenAdmissions, got.lastAfterFirst)
	}
	got = run(t, 2, 2)
	t.Logf("Retries on both: %+v", got)
	if got.sends != 9 || got.tokenAdmissions != 3 {
		t.Errorf("Retries on both: %d sends, %d token admissions; want 9 (3 x 3), 3", got.sends, got.tokenAdmissions)
	}
}
