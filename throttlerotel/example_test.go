package throttlerotel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/throttlerotel"
)

// embeddedRedis stands in for the Redis every replica shares.
func embeddedRedis() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { rdb.Close(); mr.Close() }
}

// One call instruments a Throttler: its waits feed the meters, and each
// is an event on the caller's span. A service would pass nothing but the
// Throttler, and set the global providers (otel.SetMeterProvider,
// otel.SetTracerProvider) to ones that export, over OTLP say; here the
// SDK's in-memory reader and recorder show what was recorded.
func Example() {
	rdb, stop := embeddedRedis()
	defer stop()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	t, err := throttler.New(rdb, "github-api", 5000, time.Hour)
	if err != nil {
		panic(err)
	}
	err = throttlerotel.InstrumentThrottler(t,
		throttlerotel.WithMeterProvider(mp), throttlerotel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}

	ctx, span := tp.Tracer("app").Start(context.Background(), "sync-repositories")
	for range 3 {
		if err := t.Wait(ctx); err != nil {
			panic(err)
		}
		// call the API here
	}
	span.End()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			if m.Name == "throttler.admitted" {
				fmt.Printf("%s: %d %s\n", m.Name, d.DataPoints[0].Value, m.Unit)
			}
		case metricdata.Histogram[float64]:
			fmt.Printf("%s: %d waits, in %s\n", m.Name, d.DataPoints[0].Count, m.Unit)
		}
	}
	for _, e := range spans.Ended()[0].Events() {
		var outcome string
		for _, kv := range e.Attributes {
			if kv.Key == throttlerotel.OutcomeAttribute {
				outcome = kv.Value.AsString()
			}
		}
		fmt.Printf("event %s on %s: %s\n", e.Name, spans.Ended()[0].Name(), outcome)
	}
	// Output:
	// throttler.wait.duration: 3 waits, in s
	// throttler.admitted: 3 {unit}
	// event throttler.wait.end on sync-repositories: admitted
	// event throttler.wait.end on sync-repositories: admitted
	// event throttler.wait.end on sync-repositories: admitted
}

// A Group's Throttlers are instrumented as the Group makes them; their
// measurements add up over the keys, which they do not name, unless
// WithKeyAttribute(true) asks for a stream per key.
func ExampleInstrumentGroup() {
	rdb, stop := embeddedRedis()
	defer stop()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	shops, err := throttler.NewGroup(rdb, "shopify:", func(string) (throttler.KeyQuota, error) {
		return throttler.KeyQuota{Limit: 40, Interval: time.Second}, nil
	})
	if err != nil {
		panic(err)
	}
	if err := throttlerotel.InstrumentGroup(shops, throttlerotel.WithMeterProvider(mp)); err != nil {
		panic(err)
	}
	for _, shop := range []string{"a.myshopify.com", "b.myshopify.com", "b.myshopify.com"} {
		t, err := shops.For(shop)
		if err != nil {
			panic(err)
		}
		if err := t.Wait(context.Background()); err != nil {
			panic(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "throttler.admitted" {
			p := d.DataPoints[0]
			fmt.Printf("%s: %d in %d stream, with %d attributes\n", m.Name, p.Value, len(d.DataPoints), p.Attributes.Len())
		}
	}
	// Output:
	// throttler.admitted: 3 in 1 stream, with 0 attributes
}

// The waits of tenants (throttler.ContextWithTenant) carry their tenant
// on the measurements, for the first tenants only: here 2, the others
// sharing "other", so that a service with thousands of customers keeps
// a bounded number of series.
func ExampleWithMaxTenants() {
	rdb, stop := embeddedRedis()
	defer stop()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t, err := throttler.New(rdb, "openai-org", 100, time.Minute)
	if err != nil {
		panic(err)
	}
	err = throttlerotel.InstrumentThrottler(t, throttlerotel.WithMeterProvider(mp), throttlerotel.WithMaxTenants(2))
	if err != nil {
		panic(err)
	}
	for _, customer := range []string{"acme", "globex", "initech", "acme", "umbrella"} {
		if err := t.Wait(throttler.ContextWithTenant(context.Background(), customer)); err != nil {
			panic(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "throttler.tenant.admitted" {
			units := map[string]int64{}
			for _, p := range d.DataPoints {
				tenant, _ := p.Attributes.Value(throttlerotel.TenantAttribute)
				units[tenant.AsString()] += p.Value
			}
			fmt.Println("acme:", units["acme"], "globex:", units["globex"], throttlerotel.OtherTenant+":", units[throttlerotel.OtherTenant])
		}
	}
	// Output:
	// acme: 2 globex: 1 other: 2
}
