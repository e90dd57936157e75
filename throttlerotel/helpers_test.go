package throttlerotel

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/redistest"
)

func TestMain(m *testing.M) {
	redistest.VerifyTestMain(m)
}

// newRedis returns a client of a fresh miniredis, both closed with the
// test, and the server.
func newRedis(t *testing.T) (*redis.Client, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb, mr
}

// instrumented returns a Throttler on rdb made with New's arguments and
// tOpts, and instrumented to send to s with opts.
func instrumented(t *testing.T, s *sink, rdb *redis.Client, key string, limit int, interval time.Duration, tOpts []throttler.Option, opts ...Option) *throttler.Throttler {
	t.Helper()
	th, err := throttler.New(rdb, key, limit, interval, tOpts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := InstrumentThrottler(th, s.providers(opts...)...); err != nil {
		t.Fatal(err)
	}
	return th
}

// sink holds the in-memory ends of a MeterProvider and a TracerProvider.
type sink struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	mp     *sdkmetric.MeterProvider
	tp     *sdktrace.TracerProvider
}

func newSink(t *testing.T) *sink {
	t.Helper()
	s := &sink{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	s.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	t.Cleanup(func() {
		s.mp.Shutdown(context.Background())
		s.tp.Shutdown(context.Background())
	})
	return s
}

// providers are the Options that send to s.
func (s *sink) providers(more ...Option) []Option {
	return append([]Option{WithMeterProvider(s.mp), WithTracerProvider(s.tp)}, more...)
}

// collected is one collection, by instrument name.
type collected map[string]metricdata.Aggregation

func (s *sink) collect(t *testing.T) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != ScopeName || sm.Scope.Version != Version() || sm.Scope.SchemaURL != semconv.SchemaURL {
			t.Errorf("scope %+v, want %q version %q with the schema URL %q", sm.Scope, ScopeName, Version(), semconv.SchemaURL)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// countingProvider wraps a MeterProvider, and counts the callbacks its
// Meters register and unregister.
type countingProvider struct {
	metric.MeterProvider
	registered, unregistered atomic.Int64
}

func (p *countingProvider) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return &countingMeter{Meter: p.MeterProvider.Meter(name, opts...), p: p}
}

type countingMeter struct {
	metric.Meter
	p *countingProvider
}

func (m *countingMeter) RegisterCallback(f metric.Callback, insts ...metric.Observable) (metric.Registration, error) {
	reg, err := m.Meter.RegisterCallback(f, insts...)
	if err != nil {
		return nil, err
	}
	m.p.registered.Add(1)
	return &countingRegistration{Registration: reg, p: m.p}, nil
}

type countingRegistration struct {
	metric.Registration
	p *countingProvider
}

func (r *countingRegistration) Unregister() error {
	r.p.unregistered.Add(1)
	return r.Registration.Unregister()
}

// waitUnregistered collects garbage until p has seen want callbacks
// unregistered, and fails t if that takes 10s.
func waitUnregistered(t *testing.T, p *countingProvider, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.unregistered.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d callbacks unregistered 10s after what they read became garbage", p.unregistered.Load(), want)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// match reports whether set holds every attribute of want (an
// attribute.Value of the zero kind asks that the key be absent).
func match(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		v, ok := set.Value(kv.Key)
		if kv.Value.Type() == attribute.INVALID {
			if ok {
				return false
			}
			continue
		}
		if !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// absent asks match for a key's absence.
func absent(k attribute.Key) attribute.KeyValue { return attribute.KeyValue{Key: k} }

// sum adds up the points of the counter, up-down counter or gauge name
// whose attributes match want, and reports how many there were.
func (c collected) sum(t *testing.T, name string, want ...attribute.KeyValue) (total float64, points int) {
	t.Helper()
	switch d := c[name].(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes, want) {
				total, points = total+float64(p.Value), points+1
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes, want) {
				total, points = total+float64(p.Value), points+1
			}
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes, want) {
				total, points = total+p.Value, points+1
			}
		}
	case nil:
	default:
		t.Fatalf("%s is a %T, not a sum or gauge", name, d)
	}
	return total, points
}

// byInstance returns the points of the counter or gauge name whose
// attributes match want, by throttler.instance.id; it fails t when one
// lacks that attribute or two share one.
func (c collected) byInstance(t *testing.T, name string, want ...attribute.KeyValue) map[int64]float64 {
	t.Helper()
	out := map[int64]float64{}
	add := func(set attribute.Set, v float64) {
		if !match(set, want) {
			return
		}
		id, ok := set.Value(InstanceAttribute)
		if _, dup := out[id.AsInt64()]; !ok || dup {
			t.Fatalf("%s: a point %v without an instance of its own", name, set.ToSlice())
		}
		out[id.AsInt64()] = v
	}
	switch d := c[name].(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			add(p.Attributes, float64(p.Value))
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			add(p.Attributes, float64(p.Value))
		}
	case nil:
	default:
		t.Fatalf("%s is a %T, not an int64 sum or gauge", name, d)
	}
	return out
}

// count returns how many samples the histogram name holds whose
// attributes match want, and their sum.
func (c collected) count(t *testing.T, name string, want ...attribute.KeyValue) (n uint64, sum float64) {
	t.Helper()
	h, ok := c[name].(metricdata.Histogram[float64])
	if !ok && c[name] != nil {
		t.Fatalf("%s is a %T, not a histogram", name, c[name])
	}
	for _, p := range h.DataPoints {
		if match(p.Attributes, want) {
			n, sum = n+p.Count, sum+p.Sum
		}
	}
	return n, sum
}
