package throttlerotel

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/counters"
)

// waits records the WaitInfo of every wait of a Throttler, to compare
// with what was recorded on traces.
type waits struct {
	mu   sync.Mutex
	list []throttler.WaitInfo
}

func (w *waits) observe(t *throttler.Throttler) {
	t.AddObserver(throttler.Observer{Waited: func(_ context.Context, info throttler.WaitInfo) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.list = append(w.list, info)
	}})
}

func (w *waits) get() []throttler.WaitInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]throttler.WaitInfo(nil), w.list...)
}

// attrsOf returns kvs by key.
func attrsOf(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// fullThrottler returns an instrumented Throttler of one call a minute,
// whose WaitInfos w records.
func fullThrottler(t *testing.T, s *sink, w *waits, opts ...Option) *throttler.Throttler {
	t.Helper()
	rdb, _ := newRedis(t)
	th := instrumented(t, s, rdb, "traced", 1, time.Minute, nil, opts...)
	w.observe(th)
	return th
}

// By default a wait is an event on the caller's span, at the wait's end,
// with its outcome; a context without a span records nothing.
func TestWaitEvents(t *testing.T) {
	s := newSink(t)
	var w waits
	th := fullThrottler(t, s, &w)
	ctx, span := s.tp.Tracer("test").Start(context.Background(), "caller")
	if err := th.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := th.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait over the limit: %v", err)
	}
	orphan, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := th.Wait(orphan); !errors.Is(err, context.DeadlineExceeded) { // no span: nothing recorded
		t.Fatalf("Wait over the limit: %v", err)
	}
	span.End()

	ended := s.spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want only the caller's", len(ended))
	}
	events := ended[0].Events()
	infos := w.get()
	if len(events) != 2 || len(infos) < 2 {
		t.Fatalf("the caller's span holds %d events (%d waits seen), want 2", len(events), len(infos))
	}
	for i, want := range []string{"admitted", "deadline"} {
		e, info := events[i], infos[i]
		a := attrsOf(e.Attributes)
		if e.Name != WaitEventName || !e.Time.Equal(info.End) {
			t.Errorf("event %d: %q at %s, want %q at the wait's end %s", i, e.Name, e.Time, WaitEventName, info.End)
		}
		if a[OutcomeAttribute].AsString() != want || a[KeyAttribute].AsString() != "traced" || a[UnitsAttribute].AsInt64() != 1 {
			t.Errorf("event %d: attributes %v, want outcome %s, key traced, units 1", i, e.Attributes, want)
		}
		if d := a[WaitedAttribute].AsFloat64(); d != info.End.Sub(info.Start).Seconds() {
			t.Errorf("event %d: duration %v, want the wait's %v", i, d, info.End.Sub(info.Start).Seconds())
		}
		if et, ok := a[semconv.ErrorTypeKey]; (want == "admitted") == ok || (ok && et.AsString() != want) {
			t.Errorf("event %d: error.type %v (set %t), want %q only when not admitted", i, et, ok, want)
		}
	}
}

// With TraceSpans a wait is a child span with its true start and end, an
// error status when it fails; without a parent, no span unless
// WithRootSpans.
func TestWaitSpans(t *testing.T) {
	for _, root := range []bool{false, true} {
		s := newSink(t)
		var w waits
		th := fullThrottler(t, s, &w, WithTracing(TraceSpans), WithRootSpans(root))
		ctx, parent := s.tp.Tracer("test").Start(context.Background(), "caller")
		if err := th.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		if err := th.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait over the limit: %v", err)
		}
		cancel()
		orphan, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := th.Wait(orphan); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait over the limit: %v", err)
		}
		cancel()
		parent.End()

		var children, roots []sdktrace.ReadOnlySpan
		for _, sp := range s.spans.Ended() {
			switch {
			case sp.Name() != WaitSpanName:
			case sp.Parent().SpanID() == parent.SpanContext().SpanID():
				children = append(children, sp)
			case !sp.Parent().IsValid():
				roots = append(roots, sp)
			}
		}
		if len(children) != 2 || len(roots) != map[bool]int{false: 0, true: 1}[root] {
			t.Fatalf("root spans %t: %d children of the caller's span and %d roots", root, len(children), len(roots))
		}
		infos := w.get()
		for i, sp := range append(children, roots...) {
			if !sp.StartTime().Equal(infos[i].Start) || !sp.EndTime().Equal(infos[i].End) {
				t.Errorf("span %d: from %s to %s, want the wait's %s to %s", i, sp.StartTime(), sp.EndTime(), infos[i].Start, infos[i].End)
			}
			a := attrsOf(sp.Attributes())
			wantCode, want := codes.Error, "deadline"
			if i == 0 {
				wantCode, want = codes.Unset, "admitted"
			}
			if sp.Status().Code != wantCode || a[OutcomeAttribute].AsString() != want {
				t.Errorf("span %d: status %v, outcome %v; want %v, %s", i, sp.Status(), a[OutcomeAttribute], wantCode, want)
			}
			if sc := sp.InstrumentationScope(); sc.Name != ScopeName || sc.Version != Version() || sc.SchemaURL != semconv.SchemaURL {
				t.Errorf("span %d: scope %+v, want %q version %q with the schema URL %q", i, sc, ScopeName, Version(), semconv.SchemaURL)
			}
		}
		if ev := s.spans.Ended(); len(ev[len(ev)-1].Events()) != 0 {
			t.Errorf("root spans %t: the caller's span holds events with TraceSpans", root)
		}
	}
}

// TraceOff records no span and no event; the metrics stay.
func TestTraceOff(t *testing.T) {
	s := newSink(t)
	var w waits
	th := fullThrottler(t, s, &w, WithTracing(TraceOff))
	ctx, span := s.tp.Tracer("test").Start(context.Background(), "caller")
	if err := th.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	span.End()
	if ended := s.spans.Ended(); len(ended) != 1 || len(ended[0].Events()) != 0 {
		t.Errorf("TraceOff: %d spans ended, the first with events", len(ended))
	}
	if n, _ := s.collect(t).count(t, "throttler.wait.duration"); n != 1 {
		t.Errorf("TraceOff: throttler.wait.duration holds %d waits, want 1", n)
	}
}

// refuse answers 429 with Retry-After: 0 to the first n requests.
type refuse struct {
	mu sync.Mutex
	n  int
}

func (r *refuse) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n > 0 {
		r.n--
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// refusingAPI returns an instrumented Transport, with Retries 1 and c, over
// an instrumented Throttler keyed "api", and the URL of a server that
// refuses its first n requests (see refuse), both closed with the test.
func refusingAPI(t *testing.T, s *sink, n int, c counters.Counters) (*throttler.Transport, string) {
	t.Helper()
	rdb, _ := newRedis(t)
	th := instrumented(t, s, rdb, "api", 100, time.Second, nil)
	api := httptest.NewServer(&refuse{n: n})
	t.Cleanup(api.Close)
	t.Cleanup(api.Client().CloseIdleConnections)
	tr := &throttler.Transport{Base: api.Client().Transport, Route: th.Route(), Retries: 1, Counters: c}
	if err := InstrumentTransport(tr, s.providers()...); err != nil {
		t.Fatal(err)
	}
	return tr, api.URL
}

// A Transport's refusals are counted by status, verdict and retry, and are
// events on the request's span; its waits are its Throttler's.
func TestTransportRefusals(t *testing.T) {
	s := newSink(t)
	tr, url := refusingAPI(t, s, 2, nil)
	client := &http.Client{Transport: tr}
	ctx, span := s.tp.Tracer("test").Start(context.Background(), "request")
	for _, want := range []int{http.StatusTooManyRequests, http.StatusOK} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
	}
	span.End()

	got := s.collect(t)
	base := []attribute.KeyValue{semconv.HTTPResponseStatusCodeKey.Int(429), VerdictAttribute.String("pause"), absent(KeyAttribute)}
	for _, retry := range []bool{true, false} {
		if v, n := got.sum(t, "throttler.transport.refusals", append(base, RetryAttribute.Bool(retry))...); n != 1 || v != 1 {
			t.Errorf("throttler.transport.refusals{retry=%t} = %v in %d points, want 1 in 1", retry, v, n)
		}
	}
	if n, _ := got.count(t, "throttler.wait.duration", OutcomeAttribute.String("admitted")); n != 3 {
		t.Errorf("throttler.wait.duration holds %d admitted waits, want 3 (a send and its retry, then a send)", n)
	}
	var refusals []map[attribute.Key]attribute.Value
	waitEvents := 0
	for _, e := range s.spans.Ended()[0].Events() {
		switch e.Name {
		case RefusalEventName:
			refusals = append(refusals, attrsOf(e.Attributes))
		case WaitEventName:
			waitEvents++
		}
	}
	if len(refusals) != 2 || waitEvents != 3 {
		t.Fatalf("the request's span holds %d refusals and %d waits, want 2 and 3", len(refusals), waitEvents)
	}
	for i, a := range refusals {
		if a[AttemptAttribute].AsInt64() != int64(i) || a[RetryAttribute].AsBool() != (i == 0) || a[KeyAttribute].AsString() != "api" {
			t.Errorf("refusal %d: %v, want attempt %d, retry %t, key api", i, a, i, i == 0)
		}
	}
}

// retryFirst reads the first response as RetryCall, and the others as no
// refusal.
type retryFirst struct {
	mu   sync.Mutex
	seen int
}

func (*retryFirst) Peek(*http.Response) bool { return false }

func (r *retryFirst) Read(*http.Response, []byte, time.Time) counters.Quota {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen++
	if r.seen == 1 {
		return counters.Quota{Verdict: counters.RetryCall}
	}
	return counters.Quota{}
}

// A RetryCall is counted with its verdict, and its event is at the
// refusal's time (Refusal.At), before the delay the Transport waits out,
// not when the refusal is reported, after it.
func TestTransportRetryCall(t *testing.T) {
	s := newSink(t)
	tr, url := refusingAPI(t, s, 1, &retryFirst{})
	var (
		mu       sync.Mutex
		refusals []throttler.Refusal
		reported []time.Time
	)
	tr.AddObserver(throttler.TransportObserver{Refused: func(_ context.Context, r throttler.Refusal) {
		mu.Lock()
		defer mu.Unlock()
		refusals, reported = append(refusals, r), append(reported, time.Now())
	}})
	ctx, span := s.tp.Tracer("test").Start(context.Background(), "request")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	span.End()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d after the retry, want 200", resp.StatusCode)
	}

	want := []attribute.KeyValue{semconv.HTTPResponseStatusCodeKey.Int(429), VerdictAttribute.String("retry_call"), RetryAttribute.Bool(true)}
	if v, n := s.collect(t).sum(t, "throttler.transport.refusals", want...); v != 1 || n != 1 {
		t.Errorf("throttler.transport.refusals{retry_call, retried} = %v in %d points, want 1 in 1", v, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refusals) != 1 {
		t.Fatalf("%d refusals reported, want 1", len(refusals))
	}
	var events []sdktrace.Event
	for _, e := range s.spans.Ended()[0].Events() {
		if e.Name == RefusalEventName {
			events = append(events, e)
		}
	}
	if len(events) != 1 {
		t.Fatalf("the request's span holds %d refusal events, want 1", len(events))
	}
	e, at := events[0], refusals[0].At
	if !e.Time.Equal(at) || !e.Time.Before(reported[0]) {
		t.Errorf("refusal event at %s, want the refusal's time %s, before its report %s (after the delay)", e.Time, at, reported[0])
	}
	if a := attrsOf(e.Attributes); a[VerdictAttribute].AsString() != "retry_call" || !a[RetryAttribute].AsBool() || a[AttemptAttribute].AsInt64() != 0 {
		t.Errorf("refusal event attributes %v, want verdict retry_call, retried, attempt 0", e.Attributes)
	}
}
