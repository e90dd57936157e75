package throttlerotel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/go-throttler/throttler"
)

// A Throttler's waits, admissions, refusals, round trips, limit and pause
// read exactly what happened.
func TestThrottlerMetrics(t *testing.T) {
	s := newSink(t)
	rdb, _ := newRedis(t)
	th := instrumented(t, s, rdb, "api", 3, time.Minute, nil)
	ctx := context.Background()
	for range 2 {
		if err := th.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := th.Allow(ctx); err != nil || !res.Allowed {
		t.Fatalf("Allow: (%+v, %v)", res, err)
	}
	if res, err := th.Allow(ctx); err != nil || res.Allowed {
		t.Fatalf("Allow over the limit: (%+v, %v), want refused", res, err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := th.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait over the limit: %v, want it turned away for its deadline", err)
	}
	until := time.Now().Add(time.Minute)
	if err := th.PauseUntil(ctx, until); err != nil {
		t.Fatal(err)
	}

	// Round trips may still run in the background: what is read at
	// collection lies between what Stats says before it and after.
	before, from := th.Stats(), time.Now()
	got := s.collect(t)
	to, after := time.Now(), th.Stats()
	key := KeyAttribute.String("api")
	checkSum := func(name string, want float64, attrs ...attribute.KeyValue) {
		t.Helper()
		if v, n := got.sum(t, name, append(attrs, key)...); n != 1 || v != want {
			t.Errorf("%s = %v in %d points, want %v in 1", name, v, n, want)
		}
	}
	checkSum("throttler.admitted", 3)
	checkSum("throttler.allow.denials", 1)
	checkSum("throttler.pauses", 1)
	checkSum("throttler.limit", 3)
	if n, _ := got.sum(t, "throttler.redis.errors"); n != 0 {
		t.Errorf("throttler.redis.errors recorded without an error")
	}
	if v, _ := got.sum(t, "throttler.redis.round_trips", key); v < 3 || v < float64(before.Redis.RoundTrips) || v > float64(after.Redis.RoundTrips) {
		t.Errorf("throttler.redis.round_trips = %v, want at least 3, from Stats' %d before the collection to its %d after", v, before.Redis.RoundTrips, after.Redis.RoundTrips)
	}
	// The pause's end, read back through the estimate of Redis's clock,
	// is until within the error bound of the estimates that wrote and read
	// it; the callback reads it between from and to.
	slack := 2*max(before.Redis.ClockError, after.Redis.ClockError) + time.Microsecond
	lo, hi := until.Sub(to)-slack, until.Sub(from)+slack
	if v, _ := got.sum(t, "throttler.pause.remaining", key); v < lo.Seconds() || v > hi.Seconds() {
		t.Errorf("throttler.pause.remaining = %vs, want from %s to %s", v, lo, hi)
	}
	ok := OutcomeAttribute.String("admitted")
	if n, _ := got.count(t, "throttler.wait.duration", key, ok, absent(semconv.ErrorTypeKey)); n != 2 {
		t.Errorf("throttler.wait.duration holds %d admitted waits without error.type, want 2", n)
	}
	late := []attribute.KeyValue{key, OutcomeAttribute.String("deadline"), semconv.ErrorTypeKey.String("deadline")}
	if n, sum := got.count(t, "throttler.wait.duration", late...); n != 1 || sum >= 1 {
		t.Errorf("throttler.wait.duration holds %d waits turned away for their deadline, taking %vs; want 1, at once", n, sum)
	}
	if n, _ := got.count(t, "throttler.wait.duration"); n != 3 {
		t.Errorf("throttler.wait.duration holds %d waits, want 3", n)
	}
}

// A window Redis lost is healed, and counted in throttler.heals as in
// Stats.Redis.Heals.
func TestHeals(t *testing.T) {
	s := newSink(t)
	rdb, mr := newRedis(t)
	th := instrumented(t, s, rdb, "healed", 2, time.Minute, []throttler.Option{throttler.WithLogger(slog.New(slog.DiscardHandler))})
	ctx := context.Background()
	for i := range 2 {
		if res, err := th.Allow(ctx); err != nil || !res.Allowed {
			t.Fatalf("Allow %d: (%+v, %v)", i, res, err)
		}
	}
	mr.FlushAll() // the window, full, is lost
	if res, err := th.Allow(ctx); err != nil || res.Allowed {
		t.Fatalf("Allow once the window was lost: (%+v, %v), want refused while it heals", res, err)
	}
	if v, _ := s.collect(t).sum(t, "throttler.heals"); v != 1 || th.Stats().Redis.Heals != 1 {
		t.Errorf("throttler.heals = %v, Stats.Redis.Heals = %d; want 1 and 1", v, th.Stats().Redis.Heals)
	}
}

// WithWaitBuckets sets the boundaries of throttler.wait.duration's
// buckets; DefaultWaitBuckets are the default.
func TestWaitBuckets(t *testing.T) {
	for _, c := range []struct {
		opts []Option
		want []float64
	}{{nil, DefaultWaitBuckets}, {[]Option{WithWaitBuckets(0.1, 1, 10)}, []float64{0.1, 1, 10}}} {
		s := newSink(t)
		rdb, _ := newRedis(t)
		th := instrumented(t, s, rdb, "buckets", 10, time.Minute, nil, c.opts...)
		if err := th.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		h, ok := s.collect(t)["throttler.wait.duration"].(metricdata.Histogram[float64])
		if !ok || len(h.DataPoints) != 1 || !slices.Equal(h.DataPoints[0].Bounds, c.want) {
			t.Errorf("throttler.wait.duration with %d Options: %+v, want one point with the bounds %v", len(c.opts), h.DataPoints, c.want)
		}
	}
}

// Each way a wait ends has its outcome, as the attribute names it.
func TestWaitOutcomes(t *testing.T) {
	s := newSink(t)
	rdb, mr := newRedis(t)
	ctx := context.Background()
	th := instrumented(t, s, rdb, "full", 1, time.Minute, []throttler.Option{throttler.WithMaxWait(time.Second)})
	if err := th.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := th.Wait(ctx); !errors.Is(err, throttler.ErrMaxWait) {
		t.Fatalf("Wait past the maximum wait: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := th.Wait(canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a canceled context: %v", err)
	}
	if err := th.WaitN(ctx, 0); !errors.Is(err, throttler.ErrInvalidArgument) {
		t.Fatalf("WaitN(0): %v", err)
	}
	down := instrumented(t, s, rdb, "down", 10, time.Minute, []throttler.Option{throttler.WithRedisTimeout(100 * time.Millisecond)})
	mr.Close()
	if err := down.Wait(ctx); !errors.Is(err, throttler.ErrRedis) {
		t.Fatalf("Wait with Redis down: %v", err)
	}

	got := s.collect(t)
	for _, w := range []struct {
		key, outcome string
	}{{"full", "admitted"}, {"full", "max_wait"}, {"full", "abandoned"}, {"full", "invalid_argument"}, {"down", "redis_error"}} {
		attrs := []attribute.KeyValue{KeyAttribute.String(w.key), OutcomeAttribute.String(w.outcome)}
		if w.outcome != "admitted" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(w.outcome))
		}
		if n, _ := got.count(t, "throttler.wait.duration", attrs...); n != 1 {
			t.Errorf("%s: %d waits with outcome %s, want 1", w.key, n, w.outcome)
		}
	}
	if v, _ := got.sum(t, "throttler.redis.errors", KeyAttribute.String("down")); v < 1 {
		t.Errorf("throttler.redis.errors = %v with Redis down, want at least 1", v)
	}
}

// A Group's Throttlers, made before and after InstrumentGroup, add up in
// points without a key by default; with WithKeyAttribute(true), each key
// has its own, named by its digest. Places in flight are counted while
// held.
func TestGroupMetrics(t *testing.T) {
	rdb, _ := newRedis(t)
	q := throttler.KeyQuota{Limit: 10, Interval: time.Minute, InFlight: 2}
	newGroup := func(prefix string) *throttler.Group {
		g, err := throttler.NewGroup(rdb, prefix, func(string) (throttler.KeyQuota, error) { return q, nil })
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, perKey := range []bool{false, true} {
		s := newSink(t)
		prefix := "plain:"
		if perKey {
			prefix = "keyed:"
		}
		g := newGroup(prefix)
		early, err := g.For("customer-early")
		if err != nil {
			t.Fatal(err)
		}
		opts := s.providers(WithAttributes(attribute.String("throttler.group", prefix)))
		if perKey {
			opts = append(opts, WithKeyAttribute(true))
		}
		if err := InstrumentGroup(g, opts...); err != nil {
			t.Fatal(err)
		}
		late, err := g.For("customer-late")
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var inside collected
		if err := early.Do(ctx, func(context.Context) error { inside = s.collect(t); return nil }); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := late.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := s.collect(t)
		group := attribute.String("throttler.group", prefix)
		if v, _ := inside.sum(t, "throttler.in_flight.count", group); v != 1 {
			t.Errorf("perKey %t: throttler.in_flight.count = %v during Do, want 1", perKey, v)
		}
		if v, _ := got.sum(t, "throttler.in_flight.count", group); v != 0 {
			t.Errorf("perKey %t: throttler.in_flight.count = %v after Do, want 0", perKey, v)
		}
		if _, n := got.sum(t, "throttler.redis.round_trips"); n != 0 {
			t.Errorf("perKey %t: a Group reports throttler.redis.round_trips, read from Stats", perKey)
		}
		if !perKey {
			if v, n := got.sum(t, "throttler.admitted", group, absent(KeyAttribute)); n != 1 || v != 3 {
				t.Errorf("throttler.admitted = %v in %d points, want 3 in one without a key", v, n)
			}
			continue
		}
		for _, w := range []struct {
			th   *throttler.Throttler
			want float64
		}{{early, 1}, {late, 2}} {
			if strings.Contains(w.th.Key(), "customer") {
				t.Fatalf("a Group's Throttler's key %q names the key", w.th.Key())
			}
			if v, n := got.sum(t, "throttler.admitted", group, KeyAttribute.String(w.th.Key())); n != 1 || v != w.want {
				t.Errorf("throttler.admitted{key=%s} = %v in %d points, want %v in 1", w.th.Key(), v, n, w.want)
			}
			if n, _ := got.count(t, "throttler.wait.duration", KeyAttribute.String(w.th.Key())); n != uint64(w.want) {
				t.Errorf("throttler.wait.duration{key=%s} holds %d waits, want %v", w.th.Key(), n, w.want)
			}
		}
	}
}

// Settled permits count, with what they gave back and added.
func TestSettleMetrics(t *testing.T) {
	s := newSink(t)
	rdb, _ := newRedis(t)
	th := instrumented(t, s, rdb, "tokens", 1000, time.Minute, nil)
	ctx := context.Background()
	for _, actual := range []int{70, 130, 100} {
		p, err := th.Acquire(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Settle(ctx, actual); err != nil {
			t.Fatal(err)
		}
	}
	got := s.collect(t)
	for name, want := range map[string]float64{"throttler.settle.permits": 3, "throttler.settle.overestimate": 30, "throttler.settle.underestimate": 30, "throttler.admitted": 300} {
		if v, _ := got.sum(t, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if n, _ := got.count(t, "throttler.wait.duration", OutcomeAttribute.String("admitted")); n != 3 {
		t.Errorf("throttler.wait.duration holds %d admitted waits, want 3 (one per Acquire)", n)
	}
}

// The instrumentation keeps no Throttler or Group alive, and once one is
// collected its callback is unregistered.
func TestThrottlerCollected(t *testing.T) {
	s := newSink(t)
	p := &countingProvider{MeterProvider: s.mp}
	rdb, _ := newRedis(t)
	func() {
		th, err := throttler.New(rdb, "gone", 3, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := InstrumentThrottler(th, WithMeterProvider(p)); err != nil {
			t.Fatal(err)
		}
		if _, n := s.collect(t).sum(t, "throttler.limit"); n != 1 {
			t.Fatalf("throttler.limit has %d points while the Throttler lives, want 1", n)
		}
		g, err := throttler.NewGroup(rdb, "gone:", func(string) (throttler.KeyQuota, error) {
			return throttler.KeyQuota{Limit: 3, Interval: time.Minute}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := InstrumentGroup(g, WithMeterProvider(p)); err != nil {
			t.Fatal(err)
		}
	}()
	if n := p.registered.Load(); n != 2 {
		t.Fatalf("%d callbacks registered for a Throttler and a Group, want 2", n)
	}
	waitUnregistered(t, p, 2)
	if _, n := s.collect(t).sum(t, "throttler.limit"); n != 0 {
		t.Errorf("throttler.limit has %d points once the Throttler is gone, want 0", n)
	}
}

// Throttlers whose measurements share their attributes (the same key, or
// no key) are read at collection apart, each with its own
// throttler.instance.id: none adds to or overwrites another's.
func TestSameAttributesReadApart(t *testing.T) {
	s := newSink(t)
	rdb, _ := newRedis(t)
	ctx := context.Background()
	for _, keyAttr := range []bool{true, false} {
		key := fmt.Sprintf("twice-%t", keyAttr)
		a := instrumented(t, s, rdb, key, 2, time.Minute, nil, WithKeyAttribute(keyAttr))
		b := instrumented(t, s, rdb, key, 2, time.Minute, nil, WithKeyAttribute(keyAttr))
		// a takes the key's two calls and is refused once; b is refused twice.
		for i, th := range []*throttler.Throttler{a, a, a, b, b} {
			if res, err := th.Allow(ctx); err != nil || res.Allowed != (i < 2) {
				t.Fatalf("keyAttr %t: Allow %d: (%+v, %v), want allowed %t", keyAttr, i, res, err, i < 2)
			}
		}
		want := []attribute.KeyValue{KeyAttribute.String(key)}
		if !keyAttr {
			want = []attribute.KeyValue{absent(KeyAttribute)}
		}
		got := s.collect(t)
		denials := got.byInstance(t, "throttler.allow.denials", want...)
		limits := got.byInstance(t, "throttler.limit", want...)
		if len(denials) != 2 || len(limits) != 2 {
			t.Fatalf("keyAttr %t: %d points of throttler.allow.denials and %d of throttler.limit, want 2 each, by instance", keyAttr, len(denials), len(limits))
		}
		var seen []float64
		for id, v := range denials {
			seen = append(seen, v)
			if limits[id] != 2 {
				t.Errorf("keyAttr %t: throttler.limit{instance %d} = %v, want 2", keyAttr, id, limits[id])
			}
		}
		if slices.Sort(seen); !slices.Equal(seen, []float64{1, 2}) {
			t.Errorf("keyAttr %t: throttler.allow.denials by instance %v, want 1 and 2", keyAttr, seen)
		}
	}
}

// Bad input is an error wrapping ErrInvalidArgument, never a panic.
func TestInstrumentRejectsBadInput(t *testing.T) {
	rdb, _ := newRedis(t)
	th, err := throttler.New(rdb, "k", 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"nil Throttler":       InstrumentThrottler(nil),
		"nil Group":           InstrumentGroup(nil),
		"nil Transport":       InstrumentTransport(nil),
		"nil Option":          InstrumentThrottler(th, nil),
		"nil MeterProvider":   InstrumentThrottler(th, WithMeterProvider(nil)),
		"nil TracerProvider":  InstrumentThrottler(th, WithTracerProvider(nil)),
		"unknown Tracing":     InstrumentThrottler(th, WithTracing(TraceOff+1)),
		"no buckets":          InstrumentThrottler(th, WithWaitBuckets()),
		"decreasing buckets":  InstrumentThrottler(th, WithWaitBuckets(1, 0.5)),
		"repeated boundaries": InstrumentThrottler(th, WithWaitBuckets(1, 1)),
		"negative tenants":    InstrumentThrottler(th, WithMaxTenants(-1)),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error wrapping ErrInvalidArgument", name, err)
		}
	}
}

// waitFor polls cond until it holds, and fails t if it does not within
// 10s: for what takes a second of the runtime's clock, such as the end of
// a degradation.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// throttler.degraded counts the instrumented Throttlers whose calls follow
// the failure policy now (Stats.Redis.Degraded): for a Group, one it evicted
// while it had reported Degraded(true) and no false since (nobody calls
// it) no longer counts.
func TestDegraded(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	tOpts := []throttler.Option{throttler.WithFailurePolicy(throttler.FailOpen()), throttler.WithLogger(quiet)}
	for _, c := range []struct {
		name          string
		group, perKey bool
	}{{"Throttler", false, true}, {"Group", true, false}, {"Group per key", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSink(t)
			rdb, mr := newRedis(t)
			// A short interval: what the call admitted without Redis owes
			// it stops counting soon, and the Throttler can be idle.
			var th *throttler.Throttler
			var g *throttler.Group
			if c.group {
				var err error
				g, err = throttler.NewGroup(rdb, "deg:", func(string) (throttler.KeyQuota, error) {
					return throttler.KeyQuota{Limit: 10, Interval: 100 * time.Millisecond}, nil
				}, throttler.WithThrottlerOptions(tOpts...))
				if err != nil {
					t.Fatal(err)
				}
				if err := InstrumentGroup(g, s.providers(WithKeyAttribute(c.perKey))...); err != nil {
					t.Fatal(err)
				}
				if th, err = g.For("customer"); err != nil {
					t.Fatal(err)
				}
			} else {
				th = instrumented(t, s, rdb, "deg", 10, 100*time.Millisecond, tOpts)
			}
			var (
				mu       sync.Mutex
				reported []bool
			)
			th.AddObserver(throttler.Observer{Degraded: func(on bool) { mu.Lock(); reported = append(reported, on); mu.Unlock() }})
			want := []attribute.KeyValue{absent(KeyAttribute)}
			if c.perKey {
				want = []attribute.KeyValue{KeyAttribute.String(th.Key())}
			}
			check := func(when string, degraded float64, points int) {
				t.Helper()
				got := s.collect(t)
				if v, n := got.sum(t, "throttler.degraded", want...); v != degraded || n != points {
					t.Errorf("%s: throttler.degraded = %v in %d points, want %v in %d", when, v, n, degraded, points)
				}
				if byID := got.byInstance(t, "throttler.degraded", want...); len(byID) != points {
					t.Errorf("%s: throttler.degraded in %d points with an instance, want %d", when, len(byID), points)
				}
			}
			healthy := 1
			if c.group && c.perKey {
				healthy = 0 // a key's stream begins with its first degradation
			}
			check("healthy", 0, healthy)

			mr.SetError("injected: Redis is down")
			if err := th.Wait(context.Background()); err != nil {
				t.Fatalf("Wait under FailOpen with Redis down: %v", err)
			}
			check("Redis down", 1, 1)

			// A second after the failure, calls would try Redis again:
			// nobody calls, so no Degraded(false) is reported.
			waitFor(t, "Stats.Redis.Degraded still true", func() bool { return !th.Stats().Redis.Degraded })
			if c.group {
				waitFor(t, "the idle key not evicted", func() bool { return g.Sweep() == 1 })
			}
			mu.Lock()
			if !slices.Equal(reported, []bool{true}) {
				t.Errorf("Degraded reported %v, want [true]: the case is a Throttler that reports no false", reported)
			}
			mu.Unlock()
			check("no longer degraded, no call since", 0, 1)
			runtime.KeepAlive(th)
		})
	}
}

// throttler.in_flight.waits counts each time a call found every place in
// flight taken, as Stats.Places.Waits does.
func TestInFlightWaits(t *testing.T) {
	s := newSink(t)
	rdb, _ := newRedis(t)
	th := instrumented(t, s, rdb, "{slots}", 100, time.Minute, []throttler.Option{throttler.WithInFlight("{slots}:inflight", 1, time.Minute)})
	waiting := make(chan struct{}, 1)
	th.AddObserver(throttler.Observer{PlaceWait: func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}})
	ctx := context.Background()
	holding, release := make(chan struct{}), make(chan struct{})
	first, second := make(chan error, 1), make(chan error, 1)
	go func() {
		first <- th.Do(ctx, func(context.Context) error { close(holding); <-release; return nil })
	}()
	<-holding
	go func() { second <- th.Do(ctx, func(context.Context) error { return nil }) }()
	<-waiting // the second call found the one place taken
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	got := s.collect(t)
	if v, _ := got.sum(t, "throttler.in_flight.waits"); v < 1 || v != float64(th.Stats().Places.Waits) {
		t.Errorf("throttler.in_flight.waits = %v, want Stats.Places.Waits' %d (at least 1)", v, th.Stats().Places.Waits)
	}
	if v, n := got.sum(t, "throttler.in_flight.count"); v != 0 || n != 1 {
		t.Errorf("throttler.in_flight.count = %v in %d points once both calls ended, want 0 in 1", v, n)
	}
}
