package throttler

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/counters"
)

// scriptedAPI answers each request with the next of its answers (the last
// one again once they run out), and records when each request arrived.
type scriptedAPI struct {
	answers []scripted

	mu       sync.Mutex
	arrivals []time.Time
}

type scripted struct {
	status  int
	headers map[string]string
	body    string
}

func (a *scriptedAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	a.mu.Lock()
	n := len(a.arrivals)
	a.arrivals = append(a.arrivals, time.Now())
	a.mu.Unlock()
	ans := a.answers[min(n, len(a.answers)-1)]
	for k, v := range ans.headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(ans.status)
	io.WriteString(w, ans.body)
}

func (a *scriptedAPI) got() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.arrivals...)
}

// do sends one GET through c and returns the status and the whole body.
func do(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp.StatusCode, string(b)
}

// A fixed-window counter at zero pauses every replica until its reset,
// not only the one that read it.
func TestCountersZeroPausesEveryReplica(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		api := &scriptedAPI{answers: []scripted{
			{status: 200, headers: map[string]string{"RateLimit": `"default";r=0;t=1`}},
			{status: 200},
		}}
		p := twoReplicas(t, dial, key, api, counters.IETF())
		do(t, p.ca, p.url)
		// The reset is 1s from when a read the response; allow for the
		// round trip and clock conversions.
		p.assertPausedB(t, api, time.Now(), 950*time.Millisecond)
	})
}

// replicaPair is two replicas of 100 calls a second on one key, each with
// an http.Client through a Transport reading an API's Counters.
type replicaPair struct {
	url    string
	a, b   *Throttler
	ca, cb *http.Client
}

// twoReplicas starts api and two replicas on key whose Transports read c,
// all stopped when t ends.
func twoReplicas(t *testing.T, dial dialer, key string, api http.Handler, c counters.Counters) replicaPair {
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Client().CloseIdleConnections)
	p := replicaPair{url: srv.URL, a: mustNew(t, dial(), key, 100, time.Second), b: mustNew(t, dial(), key, 100, time.Second)}
	p.ca = &http.Client{Transport: &Transport{Base: srv.Client().Transport, Route: p.a.Route(), Counters: c}}
	p.cb = &http.Client{Transport: &Transport{Base: srv.Client().Transport, Route: p.b.Route(), Counters: c}}
	return p
}

// assertPausedB sends a request through b, which must reach api (its
// second request) least after read, and b must have learned a pause; then
// waits for both replicas to be idle.
func (p replicaPair) assertPausedB(t *testing.T, api *scriptedAPI, read time.Time, least time.Duration) {
	t.Helper()
	if code, _ := do(t, p.cb, p.url); code != 200 {
		t.Fatalf("b: %d", code)
	}
	if wait := api.got()[1].Sub(read); wait < least {
		t.Fatalf("b's request arrived %s after a read the refusal, want at least %s", wait, least)
	}
	if st := p.b.Stats(); st.Pauses == 0 {
		t.Errorf("b learned no pause")
	}
	waitIdle(t, p.a)
	waitIdle(t, p.b)
}

// A gradual counter at zero frees a call as one ages out: every replica
// is held to the calls of ours it counts, not paused until it is empty.
func TestCountersGradualZeroHoldsToOurCalls(t *testing.T) {
	th := miniThrottler(t, 10, 10*time.Second)
	tr := &Transport{Counters: counters.OpenAI()}
	for range 3 {
		if err := th.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// Read as though by a request sent after the three (a call is scored
	// for when its reply comes back, a little after Wait returns).
	now := time.Now().Add(20 * time.Millisecond)
	tr.follow(t.Context(), t.Context(), th, reading{q: counters.Quota{Remaining: 0, Reset: now.Add(9 * time.Second), Gradual: true}, sent: now, recv: now})
	if st := th.Stats(); st.LimitNow != 3 || st.Pauses != 0 {
		t.Fatalf("after a gradual counter at zero with 3 calls of ours: limit %d, %d pauses; want 3, none", st.LimitNow, st.Pauses)
	}
	waitIdle(t, th)
}

// Remaining below what our window leaves lowers the limit until the
// reset: the calls of ours the API had counted plus Remaining. Then at
// most Remaining more go before the reset, and after it our own window
// rules again.
func TestCountersHoldBackUntilReset(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		// The API states its counter once: 3 left, a fixed window that
		// resets 1s from now (a foreign consumer took 6 of 10).
		api := &scriptedAPI{answers: []scripted{
			{status: 200, headers: map[string]string{"RateLimit": `"default";r=3;t=1`}},
			{status: 200},
		}}
		srv := httptest.NewServer(api)
		defer srv.Close()
		defer srv.Client().CloseIdleConnections()
		a := mustNew(t, dial(), key, 10, 2*time.Second)
		b := mustNew(t, dial(), key, 10, 2*time.Second)
		ca := &http.Client{Transport: &Transport{Base: srv.Client().Transport, Route: a.Route(), Counters: counters.IETF()}}
		cb := &http.Client{Transport: &Transport{Base: srv.Client().Transport, Route: b.Route(), Counters: counters.IETF()}}

		do(t, ca, srv.URL)
		read := time.Now()
		if got := a.Stats().LimitNow; got != 4 {
			t.Fatalf("a's limit after reading 3 left: %d, want 4 (the call the API counted, plus 3)", got)
		}
		for i := range 4 {
			do(t, cb, srv.URL)
			if i == 2 && time.Since(read) > 500*time.Millisecond {
				t.Fatalf("the 3 calls the API still takes took %s", time.Since(read))
			}
		}
		arrivals := api.got()
		if wait := arrivals[4].Sub(read); wait < 900*time.Millisecond {
			t.Fatalf("the 4th call after the reading arrived %s after it, before the reset (1s)", wait)
		}
		if got := b.Stats().LimitNow; got != 10 {
			t.Errorf("b's limit after the reset: %d, want New's 10", got)
		}
		waitIdle(t, a)
		waitIdle(t, b)
	})
}

// The limit is never raised above New's, a reading of the same reset only
// lowers it, and a reading with a later reset replaces it.
func TestCountersSameResetOnlyLowers(t *testing.T) {
	mr := miniThrottler(t, 10, 10*time.Second)
	reset := time.Now().Add(5 * time.Second)
	tr := &Transport{Counters: counters.IETF()}
	apply := func(remaining int, reset time.Time) int {
		tr.apply(t.Context(), mr, []reading{{q: counters.Quota{Remaining: remaining, Reset: reset}, sent: time.Now(), recv: time.Now()}})
		return mr.Stats().LimitNow
	}
	if got := apply(4, reset); got != 4 {
		t.Fatalf("4 left: limit %d, want 4", got)
	}
	if got := apply(6, reset); got != 4 {
		t.Fatalf("6 left, same reset: limit %d, want 4 still", got)
	}
	if got := apply(2, reset); got != 2 {
		t.Fatalf("2 left, same reset: limit %d, want 2", got)
	}
	if got := apply(7, reset.Add(-2*time.Second)); got != 2 {
		t.Fatalf("7 left, an earlier reset: limit %d, want 2 still", got)
	}
	if got := apply(7, reset.Add(3*time.Second)); got != 7 {
		t.Fatalf("7 left, a later reset: limit %d, want 7", got)
	}
	if got := apply(50, reset.Add(4*time.Second)); got != 10 {
		t.Fatalf("50 left, a later reset: limit %d, want New's 10", got)
	}
	waitIdle(t, mr)
}

// A gradual counter's limit is the least its readings of the last
// interval imply (another consumer's calls that aged out a moment ago come
// back), and a reading older than that no longer holds it down; readings
// applied in one batch all count.
func TestCountersGradualHoldsTheLeast(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		th := mustNew(t, dial(), key, 10, 10*time.Second, WithLogger(quiet))
		tr := &Transport{Counters: counters.OpenAI()}
		now := time.Now()
		read := func(remaining int, sent time.Time) reading {
			return reading{q: counters.Quota{Remaining: remaining, Reset: now.Add(10 * time.Second), Gradual: true}, sent: sent, recv: now}
		}
		apply := func(batch ...reading) int {
			tr.apply(t.Context(), th, batch)
			return th.Stats().LimitNow
		}
		// A reading two intervals old is recorded, but holds nothing now.
		if got := apply(read(2, now.Add(-20*time.Second))); got != 10 {
			t.Fatalf("a reading two intervals old: limit %d, want New's 10", got)
		}
		if got := apply(read(6, now)); got != 6 {
			t.Fatalf("6 left now: limit %d, want 6 (the old reading's 2 no longer counts)", got)
		}
		if got := apply(read(8, now)); got != 6 {
			t.Fatalf("8 left a moment later: limit %d, want 6 still, the least of the interval", got)
		}
		if got := apply(read(9, now), read(5, now), read(7, now)); got != 5 {
			t.Fatalf("a batch leaving 9, 5 and 7: limit %d, want 5", got)
		}
		waitIdle(t, th)
	})
}

// A refusal that says neither until when nor that the counter is at zero
// (a bare 429, under the default Counters or a preset) backs every replica
// off, and the back-off doubles when the API refuses again soon after it,
// whichever replica reads it.
func TestCountersBackoffGrowsAcrossReplicas(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		bare := scripted{status: 429, body: "slow down"}
		api := &scriptedAPI{answers: []scripted{bare, bare, {status: 200}}}
		srv := httptest.NewServer(api)
		defer srv.Close()
		defer srv.Client().CloseIdleConnections()
		a := mustNew(t, dial(), key, 100, time.Second)
		b := mustNew(t, dial(), key, 100, time.Second)
		tr := func(th *Throttler, c counters.Counters) *http.Client {
			return &http.Client{Transport: &Transport{Base: srv.Client().Transport, Route: th.Route(), Counters: c, Backoff: 300 * time.Millisecond}}
		}
		ca, cb := tr(a, nil), tr(b, counters.GitHub())
		if code, body := do(t, ca, srv.URL); code != 429 || body != bare.body {
			t.Fatalf("a got %d %q, want the 429 and its body untouched", code, body)
		}
		first := time.Now()
		do(t, cb, srv.URL) // waits out 300ms, then is refused again
		second := time.Now()
		do(t, ca, srv.URL) // waits out 600ms
		arrivals := api.got()
		if d := arrivals[1].Sub(first); d < 280*time.Millisecond {
			t.Fatalf("b's call arrived %s after the first refusal, want after the 300ms back-off", d)
		}
		if d := arrivals[2].Sub(second); d < 560*time.Millisecond {
			t.Fatalf("a's call arrived %s after the second refusal, want after a doubled back-off (600ms)", d)
		}
		waitIdle(t, a)
		waitIdle(t, b)
	})
}

// A refusal while a back-off lasts came from a call sent before it: it
// does not grow the back-off.
func TestCountersBackoffNotGrownByCallsInFlight(t *testing.T) {
	th := miniThrottler(t, 100, time.Second)
	tr := &Transport{Counters: counters.GitHub(), Backoff: time.Second}
	tr.backOff(t.Context(), th, 0)
	end := th.Stats().PausedUntil
	tr.backOff(t.Context(), th, 0)
	if got := th.Stats().PausedUntil; !got.Equal(end) {
		t.Fatalf("a second refusal during the back-off moved its end by %s", got.Sub(end))
	}
	waitIdle(t, th)
}

// Stripe's lock timeout is retried alone, and pauses no one; without
// Retries, the caller gets the 429 and its body whole.
func TestCountersRetryCall(t *testing.T) {
	lock := `{"error":{"code":"lock_timeout","message":"This object cannot be accessed right now because another API request or Stripe process is currently accessing it.","type":"invalid_request_error"}}`
	api := &scriptedAPI{answers: []scripted{{status: 429, body: lock}, {status: 200, body: "charged"}}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	th := miniThrottler(t, 100, time.Second)
	c := &http.Client{Transport: &Transport{Base: srv.Client().Transport, Route: th.Route(), Counters: counters.Stripe(), Retries: 1}}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader([]byte("amount=100")))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "charged" || len(api.got()) != 2 {
		t.Fatalf("got %d %q after %d sends, want 200 after a retry", resp.StatusCode, b, len(api.got()))
	}
	if d := api.got()[1].Sub(api.got()[0]); d < 90*time.Millisecond {
		t.Errorf("the retry went %s after the lock timeout, want about 100ms", d)
	}
	if st := th.Stats(); st.Pauses != 0 {
		t.Errorf("a lock timeout paused the Throttler %d times", st.Pauses)
	}

	api2 := &scriptedAPI{answers: []scripted{{status: 429, body: lock}}}
	srv2 := httptest.NewServer(api2)
	defer srv2.Close()
	defer srv2.Client().CloseIdleConnections()
	c2 := &http.Client{Transport: &Transport{Base: srv2.Client().Transport, Route: th.Route(), Counters: counters.Stripe()}}
	if code, body := do(t, c2, srv2.URL); code != 429 || body != lock {
		t.Fatalf("without Retries: %d %q, want the 429 with its body", code, body)
	}
	waitIdle(t, th)
}

// A body longer than what Counters peek at reaches the caller whole.
func TestCountersPeekKeepsTheBody(t *testing.T) {
	long := `{"message":"Resource not accessible by integration","pad":"` + strings.Repeat("x", 3*counters.PeekBytes) + `"}`
	api := &scriptedAPI{answers: []scripted{{status: 403, body: long}}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	th := miniThrottler(t, 100, time.Second)
	c := &http.Client{Transport: &Transport{Base: srv.Client().Transport, Route: th.Route(), Counters: counters.GitHub(), Retries: 2}}
	if code, body := do(t, c, srv.URL); code != 403 || body != long {
		t.Fatalf("got %d and %d bytes, want the 403 and its %d bytes", code, len(body), len(long))
	}
	if n := len(api.got()); n != 1 {
		t.Fatalf("a 403 that is no quota was sent %d times", n)
	}
	if st := th.Stats(); st.Pauses != 0 {
		t.Errorf("a 403 that is no quota paused the Throttler")
	}
	waitIdle(t, th)
}

// TestCountersKeepNoThrottlerAlive: a Transport following counters for
// many Throttlers (a Group's, one per credential) keeps no entry for any of
// them once their readings are applied, so that an evicted Throttler can be
// collected.
func TestCountersKeepNoThrottlerAlive(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		reset := time.Now().Add(time.Minute).Unix()
		api := httptest.NewServer(&scriptedAPI{answers: []scripted{{status: 200, headers: map[string]string{
			"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "10", "X-RateLimit-Reset": strconv.FormatInt(reset, 10)}}}})
		defer api.Close()
		ths := map[string]*Throttler{}
		for i := range 5 {
			ths[strconv.Itoa(i)] = mustNew(t, dial(), key+":"+strconv.Itoa(i), 100, time.Minute)
		}
		tr := &Transport{Counters: counters.GitHub(), Route: func(r *http.Request) *Throttler { return ths[r.Header.Get("X-Key")] }}
		c := &http.Client{Transport: tr}
		for k := range ths {
			req, _ := http.NewRequest(http.MethodGet, api.URL, nil)
			req.Header.Set("X-Key", k)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		n := 0
		tr.followers.Range(func(any, any) bool { n++; return true })
		if n != 0 {
			t.Fatalf("the Transport keeps %d Throttlers after their readings were applied", n)
		}
		for _, th := range ths {
			if got := th.Stats().LimitNow; got >= 100 {
				t.Fatalf("limit in force %d: the reading (10 remaining) was not followed", got)
			}
		}
	})
}
