package throttlerotel

import (
	"errors"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and the tracer this
// package takes from the providers.
const ScopeName = "github.com/go-throttler/throttler/throttlerotel"

// ErrInvalidArgument is wrapped by the error an Instrument function
// returns for bad input: a nil Throttler, Group or Transport, or a bad
// Option.
var ErrInvalidArgument = errors.New("throttlerotel: invalid argument")

// DefaultWaitBuckets are the bucket boundaries, in seconds, of the
// throttler.wait.duration histogram when WithWaitBuckets gives none: from
// half a millisecond (a wait admitted at once, in one Redis round trip) to
// a minute.
var DefaultWaitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Option configures an Instrument function. A bad value makes it return
// an error wrapping ErrInvalidArgument.
type Option func(*config) error

// Tracing is how a wait is recorded on the caller's trace (see WithTracing).
type Tracing uint8

const (
	// TraceEvents records each wait as an event named throttler.wait.end
	// (WaitEventName) on the span the wait's context carries, at the
	// moment the wait returned, and each refusal a Transport reads as an
	// event named throttler.transport.refusal (RefusalEventName) on the
	// request's span, at the refusal's time (throttler.Refusal.At). A context without a
	// recording span records nothing. The default.
	TraceEvents Tracing = iota
	// TraceSpans records each wait as a span of its own named
	// throttler.wait (WaitSpanName), a child of the span the wait's context carries,
	// from the wait's start to its end; refusals are events as with
	// TraceEvents. A context without a span records no wait, unless
	// WithRootSpans asks for one.
	TraceSpans
	// TraceOff records nothing on traces.
	TraceOff
)

type config struct {
	mp          metric.MeterProvider
	tp          trace.TracerProvider
	attrs       []attribute.KeyValue
	key, keySet bool // WithKeyAttribute
	tracing     Tracing
	rootSpans   bool
	buckets     []float64
	maxTenants  int // WithMaxTenants
}

func newConfig(where string, keyDefault bool, opts []Option) (*config, error) {
	c := &config{
		mp:         otel.GetMeterProvider(),
		tp:         otel.GetTracerProvider(),
		buckets:    DefaultWaitBuckets,
		maxTenants: DefaultMaxTenants,
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, invalidf("%s: nil Option", where)
		}
		if err := opt(c); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	if !c.keySet {
		c.key = keyDefault
	}
	return c, nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// WithMeterProvider sets where the instruments are made. Default the
// global provider (otel.GetMeterProvider) as it is when the Instrument
// function is called. To record traces only, give a provider from
// go.opentelemetry.io/otel/metric/noop.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return invalidf("WithMeterProvider(nil)")
		}
		c.mp = mp
		return nil
	}
}

// WithTracerProvider sets where spans are made and events recorded (see
// WithTracing). Default the global provider (otel.GetTracerProvider) as
// it is when the Instrument function is called. A wait recorded as an
// event goes on the caller's span whatever the provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return invalidf("WithTracerProvider(nil)")
		}
		c.tp = tp
		return nil
	}
}

// WithAttributes adds attrs to every measurement, span and event recorded
// (to name a Group, say: attribute.String("throttler.group", "shopify")).
// They must not vary per call: they are part of every metric stream.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) error {
		c.attrs = append(c.attrs, attrs...)
		return nil
	}
}

// WithKeyAttribute sets whether measurements carry the attribute
// throttler.key, the Throttler's Key (a Redis key). Default true for
// InstrumentThrottler, and false for InstrumentGroup and
// InstrumentTransport, whose Throttlers can be as many as the keys in use:
// each key would make metric streams of its own. A Group's Throttler is
// keyed by a digest of its key (see throttler.Group), never the key
// itself. Spans and events carry throttler.key whatever this says. Two
// Throttlers with the same attributes add up in the event-fed
// instruments; what is read from their Stats stays apart, by
// throttler.instance.id (see the package's documentation).
func WithKeyAttribute(on bool) Option {
	return func(c *config) error {
		c.key, c.keySet = on, true
		return nil
	}
}

// WithTracing sets how waits are recorded on traces. Default TraceEvents.
func WithTracing(mode Tracing) Option {
	return func(c *config) error {
		if mode > TraceOff {
			return invalidf("WithTracing(%d): not a Tracing", mode)
		}
		c.tracing = mode
		return nil
	}
}

// WithRootSpans has TraceSpans record a wait whose context carries no
// span as a span of its own, the root of a new trace. Default false: such
// a wait records no span.
func WithRootSpans(on bool) Option {
	return func(c *config) error {
		c.rootSpans = on
		return nil
	}
}

// WithWaitBuckets sets the bucket boundaries, in seconds, of the
// throttler.wait.duration histogram, in increasing order. Default
// DefaultWaitBuckets. A View set on the MeterProvider overrides them.
func WithWaitBuckets(bounds ...float64) Option {
	return func(c *config) error {
		if len(bounds) == 0 {
			return invalidf("WithWaitBuckets: no boundaries")
		}
		for i, b := range bounds {
			if b != b || (i > 0 && b <= bounds[i-1]) {
				return invalidf("WithWaitBuckets(%v): boundaries must increase", bounds)
			}
		}
		c.buckets = slices.Clone(bounds)
		return nil
	}
}
