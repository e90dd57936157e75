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
)

// backoffAPI answers 429 with Retry-After to the first `refuse` requests,
// then 200, and records when each request arrived and with what body.
type backoffAPI struct {
	refuse     int
	retryAfter string
	limit      string // X-RateLimit-Limit on every response, when set

	mu       sync.Mutex
	arrivals []time.Time
	bodies   []string
	replicas []string
}

func (a *backoffAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	n := len(a.arrivals)
	a.arrivals = append(a.arrivals, time.Now())
	a.bodies = append(a.bodies, string(b))
	a.replicas = append(a.replicas, r.Header.Get("X-Replica"))
	a.mu.Unlock()
	if a.limit != "" {
		w.Header().Set("X-RateLimit-Limit", a.limit)
	}
	if n < a.refuse {
		w.Header().Set("Retry-After", a.retryAfter)
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *backoffAPI) snapshot() ([]time.Time, []string, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.arrivals...), append([]string(nil), a.bodies...), append([]string(nil), a.replicas...)
}

func get(t *testing.T, c *http.Client, url, replica string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-Replica", replica)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// A 429 with Retry-After seen by one replica pauses the other: no request
// of either reaches the API before the pause ends.
func TestTransportSharesRetryAfter(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		api := &backoffAPI{refuse: 1, retryAfter: "1"}
		srv := httptest.NewServer(api)
		defer srv.Close()
		a := mustNew(t, dial(), key, 100, time.Second)
		b := mustNew(t, dial(), key, 100, time.Second)
		ca := &http.Client{Transport: a.RoundTripper(srv.Client().Transport)}
		cb := &http.Client{Transport: b.RoundTripper(srv.Client().Transport)}

		if code := get(t, ca, srv.URL, "a"); code != http.StatusTooManyRequests {
			t.Fatalf("first response %d, want the API's 429 handed back untouched", code)
		}
		arrivals, _, _ := api.snapshot()
		pauseEnd := arrivals[0].Add(time.Second)
		for i := range 3 {
			if code := get(t, cb, srv.URL, "b"); code != http.StatusOK {
				t.Fatalf("b's request %d: %d", i, code)
			}
		}
		if code := get(t, ca, srv.URL, "a"); code != http.StatusOK {
			t.Fatalf("a's second request: %d", code)
		}
		arrivals, _, replicas := api.snapshot()
		// The pause is measured from when a read the 429, after it arrived.
		for i, at := range arrivals[1:] {
			if at.Before(pauseEnd) {
				t.Fatalf("request %d (replica %s) arrived %s before the pause ended", i+1, replicas[i+1], pauseEnd.Sub(at))
			}
		}
		if st := b.Stats(); st.Pauses != 1 {
			t.Errorf("b learned %d pauses, want 1", st.Pauses)
		}
		waitIdle(t, a)
		waitIdle(t, b)
	})
}

// Retries resend a replayable body after the pause, and never a body that
// cannot be replayed.
func TestTransportRetries(t *testing.T) {
	th := miniThrottler(t, 100, time.Second)
	api := &backoffAPI{refuse: 1, retryAfter: "0"}
	srv := httptest.NewServer(api)
	defer srv.Close()
	tr := &Transport{Base: srv.Client().Transport, Route: th.Route(), Retries: 2}
	client := &http.Client{Transport: tr}

	// http.NewRequest sets GetBody for a *bytes.Reader: replayable.
	req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader([]byte("once more")))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, bodies, _ := api.snapshot()
	if resp.StatusCode != http.StatusOK || len(bodies) != 2 || bodies[0] != "once more" || bodies[1] != "once more" {
		t.Fatalf("replayable POST: status %d, API saw %q; want 200 after one retry with the same body", resp.StatusCode, bodies)
	}

	// A body without GetBody is sent once; the caller gets the 429.
	api2 := &backoffAPI{refuse: 5, retryAfter: "0"}
	srv2 := httptest.NewServer(api2)
	defer srv2.Close()
	tr.Base = srv2.Client().Transport
	body := &trackedBody{Reader: strings.NewReader("only once")}
	req, _ = http.NewRequest(http.MethodPost, srv2.URL, body)
	resp, err = tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, bodies, _ = api2.snapshot()
	if resp.StatusCode != http.StatusTooManyRequests || len(bodies) != 1 {
		t.Fatalf("non-replayable POST: status %d, sent %d times; want the 429, sent once", resp.StatusCode, len(bodies))
	}
	if !body.closed.Load() {
		t.Error("the request body was not closed")
	}

	// Retries are bounded.
	api3 := &backoffAPI{refuse: 100, retryAfter: "0"}
	srv3 := httptest.NewServer(api3)
	defer srv3.Close()
	tr.Base = srv3.Client().Transport
	req, _ = http.NewRequest(http.MethodGet, srv3.URL, nil)
	resp, err = tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, _, _ := api3.snapshot(); resp.StatusCode != http.StatusTooManyRequests || len(got) != 3 {
		t.Fatalf("always-429 API: status %d after %d sends, want 429 after 1+2", resp.StatusCode, len(got))
	}
	for _, s := range []*httptest.Server{srv, srv2, srv3} {
		s.Client().CloseIdleConnections()
	}
	waitIdle(t, th)
}

// ByHost gives each API its own quota; other hosts go unthrottled.
func TestTransportByHost(t *testing.T) {
	api1, api2, free := &backoffAPI{}, &backoffAPI{}, &backoffAPI{}
	s1, s2, s3 := httptest.NewServer(api1), httptest.NewServer(api2), httptest.NewServer(free)
	defer s1.Close()
	defer s2.Close()
	defer s3.Close()
	t1, t2 := miniThrottler(t, 100, time.Second), miniThrottler(t, 100, time.Second)
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	client := &http.Client{Transport: &Transport{
		Base:  s1.Client().Transport,
		Route: ByHost(map[string]*Throttler{host(s1): t1, host(s2): t2}),
	}}
	for range 3 {
		get(t, client, s1.URL, "")
	}
	for range 2 {
		get(t, client, s2.URL, "")
	}
	get(t, client, s3.URL, "")
	if a1, a2 := t1.Stats().Admitted, t2.Stats().Admitted; a1 != 3 || a2 != 2 {
		t.Fatalf("admitted %d on the first API's Throttler and %d on the second's, want 3 and 2", a1, a2)
	}
	if got, _, _ := free.snapshot(); len(got) != 1 {
		t.Fatalf("the unthrottled host saw %d requests, want 1", len(got))
	}
	s1.Client().CloseIdleConnections()
	waitIdle(t, t1)
	waitIdle(t, t2)
}

// LimitHeader lowers the shared limit to what the API states, for every
// replica, and a higher statement ends the lowering.
func TestTransportLimitHeader(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		api := &backoffAPI{limit: "3"}
		srv := httptest.NewServer(api)
		defer srv.Close()
		a := mustNew(t, dial(), key, 10, 200*time.Millisecond)
		b := mustNew(t, dial(), key, 10, 200*time.Millisecond)
		ca := &http.Client{Transport: &Transport{Base: srv.Client().Transport, Route: a.Route(), LimitHeader: "X-RateLimit-Limit"}}
		get(t, ca, srv.URL, "a")
		if got := a.Stats().LimitNow; got != 3 {
			t.Fatalf("a's limit after the API said 3: %d", got)
		}
		allowed := 0
		for range 5 {
			if res, err := b.Allow(t.Context()); err != nil {
				t.Fatal(err)
			} else if res.Allowed {
				allowed++
			}
		}
		if allowed != 2 {
			t.Fatalf("b allowed %d more calls in the window after 1 of 3, want 2", allowed)
		}
		// The window frees within 200ms; the next response states 50.
		api.mu.Lock()
		api.limit = strconv.Itoa(50)
		api.mu.Unlock()
		get(t, ca, srv.URL, "a")
		us, err := b.Usage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if us[0].Limit != 10 {
			t.Fatalf("limit in force after the API said 50: %d, want New's 10", us[0].Limit)
		}
		srv.Client().CloseIdleConnections()
		waitIdle(t, a)
		waitIdle(t, b)
	})
}
