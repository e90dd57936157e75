package fakequota

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func serve(t *testing.T, a *API, consumer string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set(ConsumerHeader, consumer)
	w := httptest.NewRecorder()
	a.ServeHTTP(w, req)
	return w
}

// A fixed window counts every consumer, states its reset in epoch seconds
// at the window's end, refuses beyond it with 403 and remaining 0, and
// starts afresh at the next window.
func TestGitHubStyle(t *testing.T) {
	now := time.Unix(1000, 0)
	a := New(Config{Style: GitHub, Limit: 3, Window: 10 * time.Second, Now: func() time.Time { return now }},
		func(c string) bool { return c == "foreign" })
	serve(t, a, "foreign")
	w := serve(t, a, "r0")
	if got := w.Header().Get("X-RateLimit-Remaining"); got != "1" {
		t.Fatalf("remaining after 2 calls of 3: %q", got)
	}
	if got := w.Header().Get("X-RateLimit-Reset"); got != "1010" {
		t.Fatalf("reset: %q, want 1010", got)
	}
	serve(t, a, "r0")
	w = serve(t, a, "r0")
	if w.Code != 403 || w.Header().Get("X-RateLimit-Remaining") != "0" || strings.Contains(w.Body.String(), "secondary") {
		t.Fatalf("the 4th call: %d remaining %q %q; want a primary 403 at 0", w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Body.String())
	}
	now = now.Add(10 * time.Second)
	if w := serve(t, a, "r0"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("the next window: %d remaining %q", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	ans := a.Answers()
	if ans[1].Foreign != 1 || ans[4].Foreign != 0 {
		t.Fatalf("foreign calls counted: %d then %d, want 1 then 0", ans[1].Foreign, ans[4].Foreign)
	}
}

// The secondary limit refuses with a message and neither retry-after nor
// remaining 0.
func TestGitHubSecondary(t *testing.T) {
	now := time.Unix(1000, 0)
	a := New(Config{Style: GitHub, Limit: 100, Window: 10 * time.Second, Secondary: 2, SecondaryWindow: time.Second,
		Now: func() time.Time { return now }}, nil)
	serve(t, a, "r0")
	serve(t, a, "r0")
	w := serve(t, a, "r0")
	if w.Code != 403 || !strings.Contains(w.Body.String(), "secondary rate limit") || w.Header().Get("Retry-After") != "" ||
		w.Header().Get("X-RateLimit-Remaining") == "0" {
		t.Fatalf("over the secondary limit: %d %q retry-after %q remaining %q", w.Code, w.Body.String(),
			w.Header().Get("Retry-After"), w.Header().Get("X-RateLimit-Remaining"))
	}
	now = now.Add(time.Second)
	if w := serve(t, a, "r0"); w.Code != 200 {
		t.Fatalf("a second later: %d", w.Code)
	}
}

// The secondary limit may answer 429 with retry-after instead: the whole
// seconds until the window has room.
func TestGitHubSecondary429RetryAfter(t *testing.T) {
	now := time.Unix(1000, 0)
	a := New(Config{Style: GitHub, Limit: 100, Window: 10 * time.Second, Secondary: 2, SecondaryWindow: 2 * time.Second,
		SecondaryStatus: http.StatusTooManyRequests, SecondaryRetryAfter: true, Now: func() time.Time { return now }}, nil)
	serve(t, a, "r0")
	now = now.Add(300 * time.Millisecond)
	serve(t, a, "r0")
	now = now.Add(200 * time.Millisecond)
	// The first call leaves the window 1.5s from now: retry-after 2.
	w := serve(t, a, "r0")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" || !strings.Contains(w.Body.String(), "secondary rate limit") {
		t.Fatalf("over the secondary limit: %d %q retry-after %q", w.Code, w.Body.String(), w.Header().Get("Retry-After"))
	}
	now = now.Add(1500 * time.Millisecond)
	if w := serve(t, a, "r0"); w.Code != 200 {
		t.Fatalf("once the first call left: %d", w.Code)
	}
}

// A sliding window states the time until it holds no call, as a duration,
// and refuses with 429; a refused call counts all the same, as OpenAI's
// do.
func TestOpenAIStyle(t *testing.T) {
	now := time.Unix(1000, 0)
	a := New(Config{Style: OpenAI, Limit: 2, Window: 10 * time.Second, Now: func() time.Time { return now }}, nil)
	serve(t, a, "r0")
	now = now.Add(4 * time.Second)
	w := serve(t, a, "r0")
	if got := w.Header().Get("X-Ratelimit-Reset-Requests"); got != "10s" {
		t.Fatalf("reset: %q, want 10s", got)
	}
	now = now.Add(time.Second)
	if w := serve(t, a, "r0"); w.Code != 429 || w.Header().Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Fatalf("the 3rd call: %d", w.Code)
	}
	now = now.Add(5 * time.Second) // the first call has aged out, the refused one counts
	if w := serve(t, a, "r0"); w.Code != 429 {
		t.Fatalf("with the refused call still counted: %d, want 429", w.Code)
	}
	now = now.Add(5 * time.Second) // the two calls at +4s and +5s have aged out
	if w := serve(t, a, "r0"); w.Code != 200 || w.Header().Get("X-Ratelimit-Reset-Requests") != "10s" {
		t.Fatalf("after the others aged out: %d reset %q", w.Code, w.Header().Get("X-Ratelimit-Reset-Requests"))
	}
}

// An answer records what its response stated (the reset as sent), the
// calls of each kind counted, and the request's TraceHeader.
func TestAnswerTrace(t *testing.T) {
	now := time.Unix(1000, 0)
	a := New(Config{Style: OpenAI, Limit: 3, Window: 10 * time.Second, Now: func() time.Time { return now }},
		func(c string) bool { return c == "foreign" })
	serve(t, a, "foreign")
	now = now.Add(time.Second)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set(ConsumerHeader, "r0")
	req.Header.Set(TraceHeader, "r0-1")
	w := httptest.NewRecorder()
	a.ServeHTTP(w, req)
	ans := a.Answers()
	got := ans[1]
	if got.Trace != "r0-1" || got.Foreign != 1 || got.Ours != 1 || got.Remaining != 1 || got.Reset != w.Header().Get("X-Ratelimit-Reset-Requests") || got.Reset != "10s" {
		t.Fatalf("answer %+v, reset header %q", got, w.Header().Get("X-Ratelimit-Reset-Requests"))
	}
	if ans[0].Trace != "" || ans[0].Ours != 0 {
		t.Fatalf("the foreign call's answer: %+v", ans[0])
	}
}
