package throttler

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// steppedClock is a local clock that a test moves ahead, as time spent
// dialing a connection moves it.
type steppedClock struct{ step atomic.Int64 }

func (c *steppedClock) now() time.Time { return time.Now().Add(time.Duration(c.step.Load())) }

// connBase is an http.RoundTripper that plays net/http's part in a send:
// it takes dial to get its connection (moving the clock ahead), calls the
// request's GotConn, WroteHeaders and GotFirstResponseByte hooks as
// net/http does, and records when, by th's estimate of the server's
// clock, the request was written.
type connBase struct {
	clock *steppedClock
	th    *Throttler
	dial  func(n int) time.Duration // for the n-th request, from 1
	// The dial takes its time on the runtime's clock too (a sleep), not
	// only on the local one: debt is scored by the runtime's (see
	// debtNow).
	sleep bool
	// before runs between the dial and GotConn, when set.
	before func(n int)

	mu      sync.Mutex
	n       int
	written []int64 // server µs
}

func (b *connBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.mu.Lock()
	b.n++
	n := b.n
	b.mu.Unlock()
	if d := b.dial(n); b.sleep {
		time.Sleep(d)
	} else {
		b.clock.step.Add(int64(d))
	}
	if b.before != nil {
		b.before(n)
	}
	trace := httptrace.ContextClientTrace(req.Context())
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{})
	}
	if trace != nil && trace.WroteHeaders != nil {
		trace.WroteHeaders()
	}
	b.mu.Lock()
	b.written = append(b.written, b.th.clock.Server(b.th.now()))
	b.mu.Unlock()
	if req.Body != nil {
		req.Body.Close()
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// writtenAt returns the server times the requests were written at.
func (b *connBase) writtenAt() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int64(nil), b.written...)
}

// gatedThrottler returns a Throttler on c whose clock a connBase moves,
// watched by rec, and the base, whose n-th request takes connDelay(n) to
// get its connection.
func gatedThrottler(t *testing.T, c redis.UniversalClient, key string, limit int, interval time.Duration, rec *recorder, connDelay func(n int) time.Duration, opts ...Option) (*Throttler, *connBase) {
	t.Helper()
	clock := &steppedClock{}
	th := rec.watch(mustNew(t, c, key, limit, interval, append([]Option{WithClock(clock.now), WithBuffer(50 * time.Millisecond)}, opts...)...))
	return th, &connBase{clock: clock, th: th, dial: connDelay}
}

// coldFirst is a connBase's delays when only the first request dials:
// 150ms, as TCP and TLS to an API 50ms away take.
func coldFirst(n int) time.Duration {
	if n == 1 {
		return 150 * time.Millisecond
	}
	return 0
}

func getVia(t *testing.T, c *http.Client, ctx context.Context) error {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://api.example/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// assertWrittenOnSlots fails the test unless each request base wrote went
// within th's allowance of its slot, the admissions rec kept, in order.
func assertWrittenOnSlots(t *testing.T, th *Throttler, base *connBase, rec *recorder) {
	t.Helper()
	scores := rec.scores()
	written := base.writtenAt()
	if len(scores) != len(written) {
		t.Fatalf("%d admissions kept for %d requests written", len(scores), len(written))
	}
	allow := th.rules.Allowance(0, th.clock.View().ErrBound())
	for i, w := range written {
		if off := w - scores[i]; off < -th.rules.EarlyTolerance() || off > allow {
			t.Errorf("request %d written %dµs from its slot, want within [-%d, %d]", i+1, off, th.rules.EarlyTolerance(), allow)
		}
	}
}

// A request whose connection comes later than its slot allows gives the
// slot back and is written on a new one: the set and the admissions hold
// the new slot only, and the request went within the allowance of it.
func TestTransportReslotsALateConnection(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var rec recorder
		rc := dial()
		th, base := gatedThrottler(t, rc, key, 5, time.Second, &rec, coldFirst)
		c := &http.Client{Transport: th.RoundTripper(base)}
		for i := range 2 {
			if err := getVia(t, c, context.Background()); err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
		}
		waitIdle(t, th)
		s := th.Stats()
		if s.Sends.Reslotted != 1 || s.Sends.SentLate != 0 {
			t.Fatalf("Reslotted %d, SentLate %d; want 1 and 0", s.Sends.Reslotted, s.Sends.SentLate)
		}
		if got := s.Sends.Delay.Count(); got != 2 {
			t.Fatalf("SendDelay counts %d sends, want 2", got)
		}
		if late := s.Sends.Delay.Counts[bucketOf(150*time.Millisecond)]; late != 1 {
			t.Fatalf("SendDelay %v: want the cold connection's 150ms in the 200ms bucket", s.Sends.Delay.Counts)
		}
		if n := len(calls(t, rc, key)); n != 2 {
			t.Fatalf("%d calls in the set, want 2: the late slot goes back", n)
		}
		assertWrittenOnSlots(t, th, base, &rec)
	})
}

// A request that cannot wait for a new slot (here a pause comes while it
// dials, and lasts past its deadline) is written all the same, as net/http
// writes a request it has a connection for: its slot goes back, and its
// call counts as debt when it went.
func TestTransportCountsALateSendWhereItGoes(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var rec recorder
		rc := dial()
		th, base := gatedThrottler(t, rc, key, 5, time.Second, &rec, coldFirst)
		base.sleep = true
		base.before = func(int) {
			if err := th.PauseUntil(context.Background(), th.now().Add(time.Minute)); err != nil {
				t.Error(err)
			}
		}
		c := &http.Client{Transport: th.RoundTripper(base)}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := getVia(t, c, ctx); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, th)
		s := th.Stats()
		if s.Sends.Reslotted != 1 || s.Sends.SentLate != 1 || s.Costs.Debt != 0 {
			t.Fatalf("Reslotted %d, SentLate %d, Debt %d; want 1, 1 and 0 (Debt is the settles')", s.Sends.Reslotted, s.Sends.SentLate, s.Costs.Debt)
		}
		set := calls(t, rc, key)
		if len(set) != 1 {
			t.Fatalf("%d calls in the set, want 1: the slot given back, the debt where the call went", len(set))
		}
		for m := range set {
			if !strings.HasPrefix(m, core.DebtPrefix) {
				t.Fatalf("the set holds %q, want a debt member", m)
			}
		}
		assertWrittenOnSlots(t, th, base, &rec)
	})
}

// A priced request written off its slot keeps its estimate, as debt where
// it went, whatever its response says it cost (see Cost).
func TestTransportLateSendKeepsItsEstimate(t *testing.T) {
	var rec recorder
	_, rc := miniClient(t)
	th, base := gatedThrottler(t, rc, "k", 5, time.Second, &rec, coldFirst)
	base.sleep = true
	base.before = func(int) {
		if err := th.PauseUntil(context.Background(), th.now().Add(time.Minute)); err != nil {
			t.Error(err)
		}
	}
	c := &http.Client{Transport: &Transport{Base: base, Route: th.Route(), Cost: &Cost{
		Estimate: func(*http.Request) int { return 3 },
		Actual:   func(*http.Response, []byte) (int, bool) { return 1, true },
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := getVia(t, c, ctx); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, th)
	if s := th.Stats(); s.Sends.SentLate != 1 || s.Costs.Settled != 1 || s.Costs.Returned != 0 {
		t.Fatalf("SentLate %d, Settled %d, Returned %d; want 1, 1 and 0", s.Sends.SentLate, s.Costs.Settled, s.Costs.Returned)
	}
	set := calls(t, rc, "k")
	if len(set) != 3 {
		t.Fatalf("%d units in the set, want the estimate's 3, as debt where the call went", len(set))
	}
	for m := range set {
		if !strings.HasPrefix(m, core.DebtPrefix) {
			t.Fatalf("the set holds %q, want debt members only", m)
		}
	}
}

// Do passes fn a context that holds an HTTP request made with it at its
// connection, as the Transport does.
func TestDoHoldsItsRequestAtTheConnection(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var rec recorder
		th, base := gatedThrottler(t, dial(), key, 5, time.Second, &rec, coldFirst)
		c := &http.Client{Transport: base}
		for i := range 2 {
			if err := th.Do(context.Background(), func(ctx context.Context) error { return getVia(t, c, ctx) }); err != nil {
				t.Fatalf("Do %d: %v", i+1, err)
			}
		}
		if err := th.DoCost(context.Background(), 2, func(ctx context.Context) (int, error) { return 2, getVia(t, c, ctx) }); err != nil {
			t.Fatalf("DoCost: %v", err)
		}
		waitIdle(t, th)
		if s := th.Stats(); s.Sends.Reslotted != 1 || s.Sends.Delay.Count() != 3 {
			t.Fatalf("Reslotted %d, sends counted %d; want 1 and 3", s.Sends.Reslotted, s.Sends.Delay.Count())
		}
		// The requests fn makes after the first, with the same context,
		// are not held: the gate is for the call's own request.
		var second atomic.Bool
		err := th.Do(context.Background(), func(ctx context.Context) error {
			if err := getVia(t, c, ctx); err != nil {
				return err
			}
			base.clock.step.Add(int64(time.Second)) // long after the slot
			second.Store(true)
			return getVia(t, c, ctx)
		})
		if err != nil || !second.Load() {
			t.Fatalf("Do: %v", err)
		}
		if s := th.Stats(); s.Sends.Reslotted != 1 || s.Sends.Delay.Count() != 4 {
			t.Fatalf("after a Do of two requests: Reslotted %d, sends counted %d; want 1 and 4", s.Sends.Reslotted, s.Sends.Delay.Count())
		}
	})
}

// Nested Transports (tokens over requests) hold their request once, at its
// connection, until both slots hold.
func TestNestedTransportsHoldOneConnection(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var rec recorder
		rc := dial()
		clock := &steppedClock{}
		opts := []Option{WithClock(clock.now), WithBuffer(50 * time.Millisecond)}
		tokens := rec.watch(mustNew(t, rc, key+":tokens", 100, time.Second, opts...))
		requests := mustNew(t, rc, key+":requests", 5, time.Second, opts...)
		base := &connBase{clock: clock, th: tokens, dial: coldFirst}
		c := &http.Client{Transport: &Transport{Route: tokens.Route(), Cost: &Cost{}, Base: requests.RoundTripper(base)}}
		for i := range 2 {
			if err := getVia(t, c, ContextWithCost(context.Background(), 3)); err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
		}
		waitIdle(t, tokens)
		waitIdle(t, requests)
		for _, th := range []*Throttler{tokens, requests} {
			if s := th.Stats(); s.Sends.Reslotted != 1 || s.Sends.Delay.Count() != 2 || s.Sends.SentLate != 0 {
				t.Fatalf("%s: Reslotted %d, sends counted %d, SentLate %d; want 1, 2, 0", th.Key(), s.Sends.Reslotted, s.Sends.Delay.Count(), s.Sends.SentLate)
			}
		}
		if n := len(base.writtenAt()); n != 2 {
			t.Fatalf("%d requests written, want 2", n)
		}
		for _, k := range []string{key + ":tokens", key + ":requests"} {
			if n, want := len(calls(t, rc, k)), map[bool]int{true: 6, false: 2}[strings.HasSuffix(k, "tokens")]; n != want {
				t.Fatalf("%s holds %d calls, want %d", k, n, want)
			}
		}
	})
}

// The watch on sends warns once, when two periods in a row had a tenth of
// their sends reslotted, and not for a cold start alone.
func TestSendWatchWarnsOnce(t *testing.T) {
	var w sendWatch
	now := time.Now()
	period := func(bad int) (warned int) {
		for i := range watchPeriod {
			s := SendInfo{Delay: time.Millisecond}
			if i < bad {
				s = SendInfo{Delay: 80 * time.Millisecond, Reslotted: true}
			}
			now = now.Add(time.Millisecond)
			if msg, _ := w.add(now, s); msg != "" {
				warned++
			}
		}
		return warned
	}
	for i, c := range []struct{ bad, warned int }{
		{50, 0}, // a cold start
		{2, 0},  // warm
		{10, 0}, // a tenth: the first period
		{30, 1}, // the second in a row
		{90, 0}, // told already
	} {
		if got := period(c.bad); got != c.warned {
			t.Fatalf("period %d with %d bad sends: warned %d times, want %d", i+1, c.bad, got, c.warned)
		}
	}
}

func TestHistogram(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Count() != 0 {
		t.Fatal("an empty histogram has no quantile")
	}
	for _, d := range []time.Duration{-time.Millisecond, time.Millisecond, 3 * time.Millisecond, 150 * time.Millisecond, time.Minute} {
		h.add(d)
	}
	if got := h.Count(); got != 5 {
		t.Fatalf("Count %d, want 5", got)
	}
	if got := h.Sum; got != time.Minute+154*time.Millisecond {
		t.Fatalf("Sum %s, want 1m0.154s (a negative delay counts as 0)", got)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.4, time.Millisecond}, {0.6, 5 * time.Millisecond}, {0.8, 200 * time.Millisecond}, {1, -1}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%g) = %s, want %s", c.q, got, c.want)
		}
	}
	if b := h.Bounds(); len(b) != len(h.Counts)-1 || b[0] != time.Millisecond {
		t.Fatalf("Bounds %v", b)
	}
}

// A call that takes a new slot at its connection queues ahead of every
// wait but the AllowN calls, whatever their priorities, and behind the
// calls that did so before it.
func TestFrontQueuesAheadOfWaits(t *testing.T) {
	var q workerState
	add := func(w *waiter) *waiter { q.insert(w); return w }
	low := add(&waiter{rank: rank{prio: PriorityLow}})
	high := add(&waiter{rank: rank{prio: PriorityHigh}})
	front1 := add(&waiter{rank: rank{prio: PriorityLow, front: true}})
	allow := add(&waiter{now: true})
	front2 := add(&waiter{rank: rank{prio: PriorityHigh, front: true}})
	want := []*waiter{allow, front1, front2, high, low}
	for i, w := range q.queue {
		if w != want[i] {
			t.Fatalf("queue position %d holds %+v, want %+v", i, *w, *want[i])
		}
	}
}

// Once its calls have shown how long their connections take, a Transport
// hands a request on that much ahead of its slot, and holds the write
// until the slot: a call that waits for its slot dials meanwhile, and
// takes no new slot.
func TestTransportDialsAheadOfTheSlot(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var rec recorder
		th, base := gatedThrottler(t, dial(), key, 3, 400*time.Millisecond, &rec, func(int) time.Duration {
			return 150 * time.Millisecond // every request dials
		})
		c := &http.Client{Transport: th.RoundTripper(base)}
		const n = 16
		for i := range n {
			if err := getVia(t, c, context.Background()); err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
		}
		waitIdle(t, th)
		// Handed on at its slot, every call's connection would come 150ms
		// late, past the allowance, and every call would take a new slot.
		// Handed on ahead by the lead, a call needs none, however late the
		// runtime woke it within the allowance; so the test counts the new
		// slots, not how close to its slot each connection came, which a
		// loaded machine moves by milliseconds.
		s := th.Stats()
		if s.Sends.Reslotted >= n {
			t.Fatalf("all %d calls reslotted (delays %v); want those handed on ahead to keep their slots", n, s.Sends.Delay.Counts)
		}
		t.Logf("%d of %d calls reslotted, delays %v", s.Sends.Reslotted, n, s.Sends.Delay.Counts)
		if lead := th.sends.lead(); lead < 150*time.Millisecond || lead > maxLead {
			t.Fatalf("lead %s, want the connections' 150ms", lead)
		}
		assertWrittenOnSlots(t, th, base, &rec)
	})
}

// A call written off its slot counts as debt where it goes by the
// runtime's clock, not by a local clock that stepped since the last
// sample: here the local clock steps 5s ahead while the request dials,
// and its context ends, so the call cannot wait for a new slot. Scored by
// the step, the debt would count 5s away from the call, and stay in Redis
// past reserve-ahead (simulation seed 20137).
func TestLateSendDebtIgnoresAClockStep(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var rec recorder
		rc := dial()
		step := func(int) time.Duration { return 5 * time.Second }
		th, base := gatedThrottler(t, rc, key, 5, time.Second, &rec, step)
		ctx, cancel := context.WithCancel(context.Background())
		base.before = func(int) { cancel() }
		c := &http.Client{Transport: th.RoundTripper(base)}
		if err := getVia(t, c, ctx); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, th)
		if s := th.Stats(); s.Sends.SentLate != 1 {
			t.Fatalf("SentLate %d, want 1", s.Sends.SentLate)
		}
		now := serverMicros(t, rc)
		for m, score := range calls(t, rc, key) {
			if !strings.HasPrefix(m, core.DebtPrefix) {
				t.Fatalf("the set holds %q, want debt only", m)
			}
			if off := score - now; off > int64(time.Second/time.Microsecond) {
				t.Fatalf("debt scored %dµs ahead of the server's clock, want where the call went", off)
			}
		}
	})
}

// A request admitted without Redis, by FallbackLocal's local share, is
// handed on at its slot, not ahead of it by the lead: no gate holds it to
// a score (see gateSend), so on a connection ready at once it would be
// written as it is handed on, before the slot the share counted it at,
// while the share's earlier calls still count there (simulation seed
// 25031: 17 requests written 19-34ms ahead of their local slots, 11 units
// over the limit plus the share in a window at the API).
func TestTransportSendsALocalAdmissionAtItsSlot(t *testing.T) {
	const interval, buffer, lead = time.Second, 50 * time.Millisecond, 300 * time.Millisecond
	th := mustNew(t, deadRedis(t), "k", 4, interval, WithLogger(quiet), WithBuffer(buffer),
		WithFailurePolicy(FallbackLocal(0.5)))
	for range leadSamples {
		th.sends.took(lead) // recent calls took 300ms to get their connections
	}
	var mu sync.Mutex
	var written []time.Time
	base := rtFunc(func(req *http.Request) (*http.Response, error) {
		mu.Lock()
		written = append(written, time.Now()) // a connection ready at once: written as handed on
		mu.Unlock()
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	})
	c := &http.Client{Transport: th.RoundTripper(base)}
	var slot time.Time // the third's slot in the local share
	for i := range 3 {
		if i == 2 {
			// The share of 2 went at once; the third's slot is the share's
			// window (interval plus buffer) after the first's slot. It is
			// read from the share itself: the first request may be written
			// a little after its slot on a loaded machine, so the gap
			// between the writes can be short of the window by as much.
			th.mu.Lock()
			slot = th.fallback.local.Clone().Slot(time.Now(), 1)
			th.mu.Unlock()
		}
		if err := getVia(t, c, context.Background()); err != nil {
			t.Fatalf("request %d with Redis down: %v", i+1, err)
		}
	}
	waitIdle(t, th)
	if gap := written[2].Sub(written[0]); gap < interval {
		t.Fatalf("third request written %s after the first, want a share's window (%s) after the first's slot", gap, interval+buffer)
	}
	if early := slot.Sub(written[2]); early > 0 {
		t.Fatalf("third request written %s before its local slot, %s after the first was written (the lead is %s)", early, slot.Sub(written[0]), th.sends.lead())
	}
}
