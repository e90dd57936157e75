package throttlerotel

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-throttler/throttler"
)

// Attribute keys this package records.
const (
	// KeyAttribute is the Throttler's Key (see WithKeyAttribute).
	KeyAttribute = attribute.Key("throttler.key")
	// OutcomeAttribute is how a wait ended: admitted, deadline, max_wait,
	// queue_full, shed, abandoned (its context ended while it waited),
	// redis_error or invalid_argument.
	OutcomeAttribute = attribute.Key("throttler.outcome")
	// UnitsAttribute is the units a wait asked for (throttler.WaitInfo.N),
	// on spans and events.
	UnitsAttribute = attribute.Key("throttler.units")
	// VerdictAttribute is what a Transport read a refusal as: pause or
	// retry_call.
	VerdictAttribute = attribute.Key("throttler.verdict")
	// RetryAttribute reports whether a Transport sends a refused request
	// again (see throttler.Refusal).
	RetryAttribute = attribute.Key("throttler.retry")
	// AttemptAttribute counts a request's sends before the one refused, on
	// events.
	AttemptAttribute = attribute.Key("throttler.attempt")
)

// instruments are the synchronous instruments, fed by the Observers of
// Throttlers and Transports.
type instruments struct {
	waitDuration                  metric.Float64Histogram
	admitted, pauses, redisErrors metric.Int64Counter
	placeWaits, settled           metric.Int64Counter
	settleSurplus, settleExcess   metric.Int64Counter
	refusals                      metric.Int64Counter
	inFlight, degraded            metric.Int64UpDownCounter
	tracer                        trace.Tracer
	meter                         metric.Meter
	tracing                       Tracing
	rootSpans                     bool
	attrs                         []attribute.KeyValue
	keyAttr                       bool
}

func newInstruments(c *config) (*instruments, error) {
	m := c.mp.Meter(ScopeName)
	in := &instruments{
		tracer:    c.tp.Tracer(ScopeName),
		meter:     m,
		tracing:   c.tracing,
		rootSpans: c.rootSpans,
		attrs:     c.attrs,
		keyAttr:   c.key,
	}
	var err error
	if in.waitDuration, err = m.Float64Histogram("throttler.wait.duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long each wait for quota took, from the call to its return, by outcome (throttler.outcome)."),
		metric.WithExplicitBucketBoundaries(c.buckets...)); err != nil {
		return nil, err
	}
	counters := []struct {
		dst               *metric.Int64Counter
		name, unit, about string
	}{
		{&in.admitted, "throttler.admitted", "{call}", "Calls admitted, by a wait or by AllowN: one of n counts n."},
		{&in.pauses, "throttler.pauses", "{pause}", "Shared pauses set or learned of (PauseUntil, an API's Retry-After)."},
		{&in.redisErrors, "throttler.redis.errors", "{error}", "Redis calls that failed or timed out."},
		{&in.placeWaits, "throttler.in_flight.waits", "{wait}", "Times a call found every place in flight taken and waited for one (WithInFlight)."},
		{&in.settled, "throttler.settled", "{permit}", "Permits settled with their actual cost (Permit.Settle)."},
		{&in.settleSurplus, "throttler.settle.surplus", "{unit}", "Units settled permits cost less than their estimate: given back."},
		{&in.settleExcess, "throttler.settle.excess", "{unit}", "Units settled permits cost more than their estimate: added as debt."},
		{&in.refusals, "throttler.transport.refusals", "{response}", "Responses a Transport read as a refusal (429, 503...), by status, verdict and whether it retried."},
	}
	for _, k := range counters {
		if *k.dst, err = m.Int64Counter(k.name, metric.WithUnit(k.unit), metric.WithDescription(k.about)); err != nil {
			return nil, err
		}
	}
	if in.inFlight, err = m.Int64UpDownCounter("throttler.in_flight", metric.WithUnit("{call}"),
		metric.WithDescription("Calls of this process holding a place in flight (WithInFlight).")); err != nil {
		return nil, err
	}
	if in.degraded, err = m.Int64UpDownCounter("throttler.degraded", metric.WithUnit("{throttler}"),
		metric.WithDescription("Throttlers whose calls follow the failure policy because Redis failed.")); err != nil {
		return nil, err
	}
	return in, nil
}

// attrSets are the attributes of one Throttler's measurements, made once.
type attrSets struct {
	base    metric.MeasurementOption
	outcome [numOutcomes]metric.MeasurementOption
	trace   []attribute.KeyValue // for spans and events: the key always
}

// attrsFor returns the attributes of t's measurements: WithAttributes',
// and t's key when keyAttr says so.
func (in *instruments) attrsFor(t *throttler.Throttler) *attrSets {
	key := KeyAttribute.String(t.Key())
	base := in.attrs[:len(in.attrs):len(in.attrs)]
	if in.keyAttr {
		base = append(base, key)
	}
	// attribute.NewSet sorts what it is given in place: base may share
	// in.attrs' array, which others read.
	a := &attrSets{base: metric.WithAttributeSet(attribute.NewSet(slices.Clone(base)...))}
	for o := range numOutcomes {
		kv := append(base[:len(base):len(base)], OutcomeAttribute.String(o.String()))
		if o != admitted {
			kv = append(kv, semconv.ErrorTypeKey.String(o.String()))
		}
		a.outcome[o] = metric.WithAttributeSet(attribute.NewSet(kv...))
	}
	a.trace = append(in.attrs[:len(in.attrs):len(in.attrs)], key)
	return a
}

// observer returns the Observer that records t's events in the
// instruments, with attributes a.
func (in *instruments) observer(a *attrSets) throttler.Observer {
	var (
		inFlight atomic.Int64 // the last number reported
		degraded atomic.Bool
	)
	bg := context.Background()
	return throttler.Observer{
		Admitted:   func(n int, _ time.Duration) { in.admitted.Add(bg, int64(n), a.base) },
		Paused:     func(time.Time) { in.pauses.Add(bg, 1, a.base) },
		RedisError: func(error) { in.redisErrors.Add(bg, 1, a.base) },
		PlaceWait:  func() { in.placeWaits.Add(bg, 1, a.base) },
		Settled: func(estimate, actual int) {
			in.settled.Add(bg, 1, a.base)
			if actual < estimate {
				in.settleSurplus.Add(bg, int64(estimate-actual), a.base)
			} else if actual > estimate {
				in.settleExcess.Add(bg, int64(actual-estimate), a.base)
			}
		},
		// The reports come in order (see throttler.Observer.InFlight):
		// their differences add up to the number in flight.
		InFlight: func(n int) {
			if d := int64(n) - inFlight.Swap(int64(n)); d != 0 {
				in.inFlight.Add(bg, d, a.base)
			}
		},
		Degraded: func(on bool) {
			if degraded.Swap(on) != on {
				in.degraded.Add(bg, delta(on), a.base)
			}
		},
		Waited: func(ctx context.Context, w throttler.WaitInfo) {
			o := outcomeOf(w.Err)
			in.waitDuration.Record(ctx, w.End.Sub(w.Start).Seconds(), a.outcome[o])
			in.traceWait(ctx, w, o, a.trace)
		},
	}
}

// delta is +1 for true, -1 for false.
func delta(on bool) int64 {
	if on {
		return 1
	}
	return -1
}
