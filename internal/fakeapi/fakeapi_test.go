package fakeapi

import (
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms ...int) []time.Time {
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		out[i] = t0.Add(time.Duration(m) * time.Millisecond)
	}
	return out
}

func TestMaxInWindow(t *testing.T) {
	tests := []struct {
		name     string
		times    []time.Time
		interval time.Duration
		want     int
	}{
		{"nil", nil, time.Second, 0},
		{"empty", []time.Time{}, time.Second, 0},
		{"one", at(0), time.Second, 1},
		{"zero interval", at(0, 1, 2), 0, 0},
		{"negative interval", at(0, 1, 2), -time.Second, 0},
		{"all in one window", at(0, 100, 999), time.Second, 3},
		{"exactly interval apart", at(0, 1000), time.Second, 1},
		{"exactly interval apart, chain", at(0, 1000, 2000, 3000), time.Second, 1},
		{"just under interval apart", at(0, 999), time.Second, 2},
		{"duplicates", at(5, 5, 5), time.Second, 3},
		{"duplicates at window edge", at(0, 0, 1000, 1000), time.Second, 2},
		{"unsorted", at(1500, 0, 900, 1200, 100), time.Second, 3},
		{"best window not at start", at(0, 1000, 1100, 1200, 1999, 2000), time.Second, 4},
		{"sparse", at(0, 2000, 4000, 6000), time.Second, 1},
		{"dense tail", at(0, 5000, 5001, 5002, 5003), time.Millisecond * 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before []time.Time
			if tt.times != nil {
				before = append([]time.Time(nil), tt.times...)
			}
			if got := MaxInWindow(tt.times, tt.interval); got != tt.want {
				t.Errorf("MaxInWindow(%v) = %d, want %d", tt.name, got, tt.want)
			}
			for i := range before {
				if !before[i].Equal(tt.times[i]) {
					t.Fatalf("MaxInWindow modified its input")
				}
			}
		})
	}
}

// bruteMax is the obvious O(n²) definition of MaxInWindow.
func bruteMax(times []time.Time, interval time.Duration) int {
	best := 0
	for _, start := range times {
		n := 0
		for _, u := range times {
			if !u.Before(start) && u.Before(start.Add(interval)) {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

func TestMaxInWindowMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		times := make([]time.Time, r.IntN(40))
		for i := range times {
			times[i] = t0.Add(time.Duration(r.IntN(50)) * 100 * time.Millisecond)
		}
		interval := time.Duration(1+r.IntN(20)) * 100 * time.Millisecond
		if got, want := MaxInWindow(times, interval), bruteMax(times, interval); got != want {
			t.Fatalf("MaxInWindow(%v, %v) = %d, want %d", times, interval, got, want)
		}
	}
}

// fakeClock is a manually advanced clock for WithClock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type response struct {
	status     int
	retryAfter string
	body       string
}

func get(t *testing.T, srv *httptest.Server, replica string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if replica != "" {
		req.Header.Set(ReplicaHeader, replica)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header.Get("Retry-After"), string(body)}
}

func TestHandlerSlidingWindow(t *testing.T) {
	clk := &fakeClock{now: t0}
	api := New(3, time.Second, WithClock(clk.Now))
	srv := httptest.NewServer(api)
	defer srv.Close()

	expect := func(step string, status int, retryAfter string) {
		t.Helper()
		r := get(t, srv, "a")
		if r.status != status || r.retryAfter != retryAfter {
			t.Fatalf("%s: got %d Retry-After %q, want %d Retry-After %q (body %q)",
				step, r.status, r.retryAfter, status, retryAfter, r.body)
		}
	}

	expect("1st", 200, "") // t=0
	clk.Advance(200 * time.Millisecond)
	expect("2nd", 200, "")  // t=200ms
	expect("3rd", 200, "")  // t=200ms
	expect("4th", 429, "1") // window (t-1s, t] already holds 3
	clk.Advance(799 * time.Millisecond)
	expect("just before the first frees", 429, "1") // t=999ms
	clk.Advance(time.Millisecond)
	expect("first frees", 200, "") // t=1s: the t=0 arrival is exactly interval ago
	expect("full again", 429, "1")
	clk.Advance(200 * time.Millisecond)
	expect("both 200ms arrivals free", 200, "") // t=1.2s
	expect("second slot", 200, "")
	expect("full", 429, "1")

	s := api.Stats()
	if s.Accepted != 6 || s.Rejected != 4 {
		t.Errorf("Stats: accepted %d rejected %d, want 6 and 4", s.Accepted, s.Rejected)
	}
	if s.MaxInWindow != 3 || s.Limit != 3 || s.Interval != time.Second {
		t.Errorf("Stats: MaxInWindow %d Limit %d Interval %v, want 3 3 1s", s.MaxInWindow, s.Limit, s.Interval)
	}
	if got := MaxInWindow(api.Arrivals(), time.Second); got != 3 {
		t.Errorf("MaxInWindow(Arrivals()) = %d, want 3", got)
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	clk := &fakeClock{now: t0}
	api := New(1, 2500*time.Millisecond, WithClock(clk.Now))
	srv := httptest.NewServer(api)
	defer srv.Close()

	if r := get(t, srv, ""); r.status != 200 {
		t.Fatalf("first: status %d", r.status)
	}
	for _, tc := range []struct {
		advance time.Duration
		want    string
	}{
		{0, "3"},                       // 2.5s left
		{500 * time.Millisecond, "2"},  // 2s left
		{time.Millisecond, "2"},        // 1.999s left
		{1500 * time.Millisecond, "1"}, // 499ms left
		{498 * time.Millisecond, "1"},  // 1ms left: at least 1
	} {
		clk.Advance(tc.advance)
		r := get(t, srv, "")
		if r.status != 429 || r.retryAfter != tc.want {
			t.Fatalf("after +%v: got %d Retry-After %q, want 429 %q", tc.advance, r.status, r.retryAfter, tc.want)
		}
	}
	clk.Advance(time.Millisecond)
	if r := get(t, srv, ""); r.status != 200 {
		t.Fatalf("after interval: status %d", r.status)
	}
}

func TestReplicaCountsAndTakeCounts(t *testing.T) {
	clk := &fakeClock{now: t0}
	api := New(2, time.Second, WithClock(clk.Now))
	srv := httptest.NewServer(api)
	defer srv.Close()

	get(t, srv, "r0") // 200
	get(t, srv, "r1") // 200
	get(t, srv, "r1") // 429
	get(t, srv, "")   // 429

	c := api.TakeCounts()
	if c.Accepted != 2 || c.Rejected != 2 ||
		c.AcceptedByReplica["r0"] != 1 || c.AcceptedByReplica["r1"] != 1 ||
		c.RejectedByReplica["r1"] != 1 || c.RejectedByReplica[""] != 1 {
		t.Fatalf("TakeCounts = %+v", c)
	}
	if c := api.TakeCounts(); c.Accepted != 0 || c.Rejected != 0 || len(c.AcceptedByReplica) != 0 {
		t.Fatalf("TakeCounts did not reset: %+v", c)
	}

	clk.Advance(time.Second)
	get(t, srv, "r0") // 200
	if c := api.TakeCounts(); c.Accepted != 1 || c.AcceptedByReplica["r0"] != 1 {
		t.Fatalf("second period: %+v", c)
	}

	s := api.Stats()
	if s.Accepted != 3 || s.Rejected != 2 || s.AcceptedByReplica["r0"] != 2 || s.RejectedByReplica["r1"] != 1 {
		t.Fatalf("Stats = %+v", s)
	}
	// Stats returns copies.
	s.AcceptedByReplica["r0"] = 100
	if api.Stats().AcceptedByReplica["r0"] != 2 {
		t.Fatal("Stats shares its maps with the API")
	}
}

func TestSetLimit(t *testing.T) {
	clk := &fakeClock{now: t0}
	api := New(4, time.Second, WithClock(clk.Now))
	srv := httptest.NewServer(api)
	defer srv.Close()

	get(t, srv, "") // t=0
	get(t, srv, "") // t=0
	clk.Advance(500 * time.Millisecond)
	api.SetLimit(2)
	if api.Limit() != 2 {
		t.Fatalf("Limit() = %d", api.Limit())
	}
	if r := get(t, srv, ""); r.status != 429 {
		t.Fatalf("after lowering the limit: status %d, want 429", r.status)
	}
	clk.Advance(500 * time.Millisecond) // t=1s: both t=0 arrivals are out
	for i := range 2 {
		if r := get(t, srv, ""); r.status != 200 {
			t.Fatalf("request %d at t=1s: status %d", i, r.status)
		}
	}
	if r := get(t, srv, ""); r.status != 429 {
		t.Fatalf("third at t=1s: status %d, want 429", r.status)
	}
	api.SetLimit(3)
	if r := get(t, srv, ""); r.status != 200 {
		t.Fatalf("after raising the limit: status %d", r.status)
	}
}

func TestReadsRequestBody(t *testing.T) {
	api := New(1, time.Second)
	srv := httptest.NewServer(api)
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL, "text/plain", strings.NewReader(strings.Repeat("x", 1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// TestRandomArrivals drives the handler with random arrival times and checks
// every decision against the definition: a request is accepted iff accepting
// it keeps every window of length interval at or under the limit.
func TestRandomArrivals(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 50 {
		clk := &fakeClock{now: t0}
		limit := 1 + r.IntN(5)
		interval := time.Duration(1+r.IntN(10)) * 100 * time.Millisecond
		api := New(limit, interval, WithClock(clk.Now))
		var accepted []time.Time
		for range 60 {
			clk.Advance(time.Duration(r.IntN(150)) * time.Millisecond)
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			now := clk.Now()
			wantOK := bruteMax(append(append([]time.Time(nil), accepted...), now), interval) <= limit
			if gotOK := rec.Code == 200; gotOK != wantOK {
				t.Fatalf("trial %d (limit %d, interval %v): at +%v got %d, want ok=%v",
					trial, limit, interval, now.Sub(t0), rec.Code, wantOK)
			}
			if wantOK {
				accepted = append(accepted, now)
			}
		}
		if s := api.Stats(); s.MaxInWindow > limit || s.Accepted != len(accepted) {
			t.Fatalf("trial %d: Stats %+v, limit %d, accepted %d", trial, s, limit, len(accepted))
		}
	}
}

// TestConcurrent hammers the API with the real clock; run it with -race.
func TestConcurrent(t *testing.T) {
	const limit = 20
	api := New(limit, 50*time.Millisecond)
	srv := httptest.NewServer(api)
	defer srv.Close()

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 25 {
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.Header.Set(ReplicaHeader, string(rune('a'+g)))
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			api.TakeCounts()
			api.Stats()
			api.Arrivals()
		}
	})
	wg.Wait()

	s := api.Stats()
	if s.Accepted+s.Rejected != 200 {
		t.Fatalf("accepted %d + rejected %d != 200", s.Accepted, s.Rejected)
	}
	if s.MaxInWindow > limit {
		t.Fatalf("MaxInWindow %d > limit %d", s.MaxInWindow, limit)
	}
	if got := MaxInWindow(api.Arrivals(), 50*time.Millisecond); got != s.MaxInWindow {
		t.Fatalf("MaxInWindow(Arrivals()) = %d, Stats().MaxInWindow = %d", got, s.MaxInWindow)
	}
}

func TestNewPanics(t *testing.T) {
	for _, tc := range []struct {
		limit    int
		interval time.Duration
	}{{0, time.Second}, {-1, time.Second}, {1, 0}, {1, -time.Second}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%d, %v) did not panic", tc.limit, tc.interval)
				}
			}()
			New(tc.limit, tc.interval)
		}()
	}
}

func TestLimitHeaderAndRejections(t *testing.T) {
	clk := &fakeClock{now: t0}
	api := New(2, time.Second, WithClock(clk.Now))
	srv := httptest.NewServer(api)
	defer srv.Close()

	do := func(replica string) (status int, limit string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(ReplicaHeader, replica)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(LimitHeader)
	}
	expect := func(step, replica string, status int, limit string) {
		t.Helper()
		if s, l := do(replica); s != status || l != limit {
			t.Fatalf("%s: got %d %s=%q, want %d %q", step, s, LimitHeader, l, status, limit)
		}
	}

	expect("1st", "a", 200, "2")
	expect("2nd", "b", 200, "2")
	clk.Advance(100 * time.Millisecond)
	expect("3rd", "b", 429, "2")
	api.SetLimit(1)
	clk.Advance(100 * time.Millisecond)
	expect("after SetLimit(1)", "a", 429, "1")
	clk.Advance(time.Second)
	expect("window free", "a", 200, "1")

	want := []Rejection{{At: t0.Add(100 * time.Millisecond), Replica: "b"}, {At: t0.Add(200 * time.Millisecond), Replica: "a"}}
	got := api.Rejections()
	if len(got) != len(want) {
		t.Fatalf("Rejections() = %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].At.Equal(want[i].At) || got[i].Replica != want[i].Replica {
			t.Fatalf("Rejections()[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	got[0].Replica = "changed"
	if api.Rejections()[0].Replica != "b" {
		t.Fatal("Rejections shares its slice with the API")
	}
	if s := api.Stats(); s.Rejected != len(want) {
		t.Fatalf("Stats().Rejected = %d, want %d", s.Rejected, len(want))
	}
}

// A request arriving while the cap is full is refused at once, without
// Retry-After and without counting in the window; the others are held, and
// their spans say when they were in flight.
func TestMaxInFlight(t *testing.T) {
	const hold = 200 * time.Millisecond
	api := New(100, time.Second, WithMaxInFlight(2), WithHold(hold))
	srv := httptest.NewServer(api)
	defer srv.Close()

	held := make(chan int, 2) // statuses, or -1 for an error
	for _, rep := range []string{"a", "b"} {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			req.Header.Set(ReplicaHeader, rep)
			resp, err := srv.Client().Do(req)
			if err != nil {
				held <- -1
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			held <- resp.StatusCode
		}()
	}
	for api.InFlight().Now < 2 {
		time.Sleep(time.Millisecond)
	}
	if r := get(t, srv, "c"); r.status != 429 || r.retryAfter != "" || !strings.Contains(r.body, "in flight") {
		t.Fatalf("third while two are held: got %d Retry-After %q (body %q), want 429 without Retry-After", r.status, r.retryAfter, r.body)
	}
	for range 2 {
		if status := <-held; status != 200 {
			t.Fatalf("held request: status %d", status)
		}
	}
	if r := get(t, srv, "c"); r.status != 200 {
		t.Fatalf("after the held ones ended: status %d", r.status)
	}

	f := api.InFlight()
	if f != (InFlightStats{Max: 3, Cap: 2, OverCap: 1, Now: 0}) {
		t.Errorf("InFlight() = %+v, want Max 3 (the refused arrival counted), Cap 2, OverCap 1, Now 0", f)
	}
	if oc := api.OverCap(); len(oc) != 1 || oc[0].Replica != "c" {
		t.Errorf("OverCap() = %v, want one from c", oc)
	}
	if s := api.Stats(); s.Accepted != 3 || s.Rejected != 0 {
		t.Errorf("Stats: accepted %d rejected %d, want 3 and 0 (the cap's refusal is not a rate rejection)", s.Accepted, s.Rejected)
	}
	spans := api.Spans()
	if len(spans) != 3 {
		t.Fatalf("Spans() = %v, want 3", spans)
	}
	for _, s := range spans {
		if d := s.End.Sub(s.Start); d < hold {
			t.Errorf("span of %s lasted %s, want at least the hold %s", s.Replica, d, hold)
		}
	}
	if last := spans[2]; last.Replica != "c" || last.Start.Before(spans[0].End) || last.Start.Before(spans[1].End) {
		t.Errorf("spans %v: c's accepted request should start after both held ones ended", spans)
	}
}
