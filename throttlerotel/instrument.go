// Package throttlerotel records what a throttler.Throttler, a
// throttler.Group and a throttler.Transport do as OpenTelemetry metrics,
// and each wait on the caller's trace: one call instruments each.
//
//	t, err := throttler.New(rdb, "github-api", 5000, time.Hour)
//	...
//	if err := throttlerotel.InstrumentThrottler(t); err != nil { ... }
//
// It is a module of its own, so that the throttler's users who do not
// import it never download OpenTelemetry. It needs the first release of
// github.com/go-throttler/throttler that has Throttler.AddObserver,
// Group.AddObserver and Transport.AddObserver (with Refusal.At), which is
// not tagged yet. Until then its go.mod requires the library at v0.0.0,
// a version that does not exist, with a replace directive to ../ that
// serves this repository only (Go ignores the replace directives of a
// dependency): it cannot be fetched as a dependency before that release
// is tagged and required; a program can use it from a clone of the
// repository, with a replace of its own.
//
// There is no semantic convention for rate limiters, so the instruments
// are named in a throttler namespace, after the conventions' general
// rules: durations in seconds in a histogram, counts with a unit in braces
// naming what is counted, error.type on waits that fail, no name that is
// also a namespace of another. The meter and the tracer carry the scope
// ScopeName, its Version, and the schema URL of the semantic conventions
// v1.43.0, whose error.type and http.response.status_code are recorded.
// A unit ({unit}) is what a Throttler's limit counts: one per call, or n
// for WaitN(n), Acquire(n) and AllowN(n). The events of every Throttler, a
// Group's included, feed synchronous instruments:
//
//   - throttler.wait.duration (histogram, s): each wait, from the call to
//     its return, with throttler.outcome (admitted, deadline, max_wait,
//     queue_full, shed, abandoned, redis_error, invalid_argument) and
//     error.type (the same, on every wait not admitted): its count by
//     outcome is the waits admitted, and turned away by cause; and, on the
//     waits of tenants, throttler.tenant.id (TenantAttribute, bounded: see
//     below);
//   - throttler.admitted ({unit}): units admitted, by waits and AllowN
//     (Stats.Admitted);
//   - throttler.tenant.admitted ({unit}): units admitted to the waits of
//     tenants (throttler.ContextWithTenant), by throttler.tenant.id
//     (Stats.Tenants counts them too, for up to 100 tenants);
//   - throttler.pauses ({pause}), throttler.redis.errors ({error}),
//     throttler.in_flight.waits ({wait}: Stats.Places.Waits);
//   - throttler.settle.permits ({permit}): permits settled;
//     throttler.settle.overestimate and throttler.settle.underestimate
//     ({unit}): by how many units their actual cost fell below, and
//     exceeded, their estimate, over every permit settled. A permit
//     admitted without Redis (FailOpen, FallbackLocal) counts here, but
//     gives nothing back and adds no debt: Stats.Costs.Returned and Stats.Costs.Debt
//     leave it out, and can be less;
//   - throttler.in_flight.count ({call}), an up-down counter: calls
//     holding a place in flight;
//   - throttler.send.delay (histogram, s): how long after its slot each
//     call sent through net/http (a Transport's, or Do's) got its
//     connection (throttler.SendInfo), with throttler.send.reslotted (it
//     took a new slot for it) and throttler.send.late (written later than
//     its slot allows all the same). Delays near or past half the buffer
//     call for a larger pool in the base transport, or a longer buffer.
//     Buckets: SendDelayBuckets (1ms to 5s).
//
// Read at each collection, for InstrumentThrottler and InstrumentGroup
// alike, throttler.degraded ({throttler}) is an asynchronous up-down
// counter of the instrumented Throttlers whose Stats.Redis.Degraded is true
// then: their calls follow the failure policy (FailOpen, FallbackLocal),
// Redis having failed within the last second. For a Group, it reads the
// Throttlers that reported Degraded(true) (throttler.Observer) and are
// still alive, those the Group evicted included: an evicted Throttler that
// nobody calls never reports Degraded(false), but its Stats tell. It costs
// a Stats call per such Throttler and collection.
//
// A Throttler given to InstrumentThrottler also has what only its Stats
// know read at each collection, by asynchronous instruments:
// throttler.redis.round_trips ({round_trip}), throttler.allow.denials
// ({call}, AllowN's refusals), throttler.late_wakes ({wake}),
// throttler.heals ({heal}), throttler.redis.round_trips.resent
// ({round_trip}: round trips sent again after a broken connection, see
// throttler.WithRedisTimeout), and the gauges throttler.limit ({unit}, the
// first limit in force) and throttler.pause.remaining (s). A Group's
// Throttlers come and go, so their Stats cannot be summed into counters
// that only grow: a Group has the event-fed instruments only.
//
// What is read at collection carries, besides the attributes below,
// throttler.instance.id (InstanceAttribute): a number that each call of
// InstrumentThrottler and InstrumentGroup takes, unique in the process.
// Two Throttlers (or Groups) whose measurements have the same attributes
// (the same key, or no key and the same WithAttributes) are thus read as
// streams apart, never as one:
// OpenTelemetry asks that no two callbacks observe the same attributes
// (the SDK would add up two Throttlers' counters, or keep one gauge of
// two), and a counter summed over two Throttlers would go down once one
// of them is collected. A Throttler's (a Group's) streams begin when it is
// instrumented, and end once it has been garbage collected: its callback
// is then unregistered. A Throttler made anew (a process that replaces
// its Throttler, say) starts streams of its own, from zero; sum over
// throttler.instance.id to count across them. The event-fed measurements
// carry no throttler.instance.id: they add up, as measurements do.
//
// A Transport given to InstrumentTransport counts the refusals it reads in
// throttler.transport.refusals ({response}), with http.response.status_code,
// throttler.verdict (pause or retry_call) and throttler.retry; the waits
// of its requests are their Throttlers' (instrument those too).
//
// Measurements carry WithAttributes' attributes, and throttler.key where
// WithKeyAttribute says so (by default, for InstrumentThrottler only).
// The waits of tenants also carry throttler.tenant.id, bounded: the first
// DefaultMaxTenants (20) tenants whose waits an Instrument call records
// (WithMaxTenants sets another bound) each have their own value, for as
// long as the instrumentation lasts, and every other tenant's waits carry
// "other" (OtherTenant). The bound is per Instrument call: a Group's
// Throttlers share it. On traces, a wait names its tenant whatever the
// bound.
// On traces, a wait is an event throttler.wait.end or a span
// throttler.wait, and a Transport's refusal an event
// throttler.transport.refusal (see WithTracing).
package throttlerotel

import (
	"context"

	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/go-throttler/throttler"
)

// InstrumentThrottler records t's events in the instruments (see the
// package's documentation) of the MeterProvider (WithMeterProvider), with
// throttler.key unless WithKeyAttribute(false) says otherwise, and each of
// its waits on the caller's trace as WithTracing says. It also registers
// a callback that reads t's Stats at each collection, with a
// throttler.instance.id of its own (see InstanceAttribute). The callback
// holds t weakly, so that an instrumented Throttler that is no longer used
// can be garbage collected; it then reports nothing more, and is
// unregistered (the error of Unregister, if any, goes to otel.Handle).
//
// Call it once per Throttler: a second call records every event twice. It
// may be called while t is in use (see throttler.Throttler.AddObserver).
// It returns an error wrapping ErrInvalidArgument for a nil t or a bad
// Option, and the MeterProvider's error when it cannot make an instrument.
func InstrumentThrottler(t *throttler.Throttler, opts ...Option) error {
	in, err := setup("InstrumentThrottler", t == nil, "Throttler", true, opts)
	if err != nil {
		return err
	}
	in.instance = lastInstance.Add(1)
	ma, ta := in.attrsFor(t)
	if err := in.observeStats(t, ma.kv); err != nil {
		return err
	}
	t.AddObserver(in.observer(ma, ta))
	return nil
}

// InstrumentGroup records the events of every Throttler g holds and makes
// from now on (see throttler.Group.AddObserver) in the instruments fed by
// events (see the package's documentation), summed over the keys unless
// WithKeyAttribute(true) asks for a throttler.key per key, and each of
// their waits on the caller's trace as WithTracing says. It also registers
// a callback that reads throttler.degraded at each collection, with a
// throttler.instance.id of its own; it does not keep g alive, and is
// unregistered once g has been garbage collected. With a key attribute, a
// key's throttler.degraded stream begins with its first degradation, and
// lasts, at 0 once it is over, while its Throttler is alive. A Group's
// Throttler's key is its Redis key, named by a digest of the key given to
// For, never the key itself.
//
// Call it once per Group. It returns an error wrapping ErrInvalidArgument
// for a nil g or a bad Option, and the MeterProvider's error when it
// cannot make an instrument.
func InstrumentGroup(g *throttler.Group, opts ...Option) error {
	in, err := setup("InstrumentGroup", g == nil, "Group", false, opts)
	if err != nil {
		return err
	}
	in.instance = lastInstance.Add(1)
	degraded, err := in.observeDegraded(g)
	if err != nil {
		return err
	}
	g.AddObserver(func(t *throttler.Throttler) throttler.Observer {
		ma, ta := in.attrsFor(t)
		o := in.observer(ma, ta)
		o.Degraded = func(on bool) { degraded.reported(t, ma, on) }
		return o
	})
	return nil
}

// InstrumentTransport counts the refusals tr reads (see
// throttler.TransportObserver) in throttler.transport.refusals, with
// throttler.key when WithKeyAttribute(true) asks for it, and records each
// as an event named throttler.transport.refusal on the request's span unless
// WithTracing(TraceOff). The waits of tr's requests are recorded by their
// Throttlers, when instrumented (InstrumentThrottler, InstrumentGroup).
//
// Call it once per Transport. It returns an error wrapping
// ErrInvalidArgument for a nil tr or a bad Option, and the MeterProvider's
// error when it cannot make an instrument.
func InstrumentTransport(tr *throttler.Transport, opts ...Option) error {
	in, err := setup("InstrumentTransport", tr == nil, "Transport", false, opts)
	if err != nil {
		return err
	}
	tr.AddObserver(throttler.TransportObserver{Refused: in.refused})
	return nil
}

// setup checks the arguments of the Instrument function where, whose
// argument of kind what is nil when isNil, and makes its instruments;
// keyDefault is WithKeyAttribute's default.
func setup(where string, isNil bool, what string, keyDefault bool, opts []Option) (*instruments, error) {
	if isNil {
		return nil, invalidf("%s: nil %s", where, what)
	}
	c, err := newConfig(where, keyDefault, opts)
	if err != nil {
		return nil, err
	}
	return newInstruments(c)
}

// refused records r, a refusal a Transport read for a request with ctx.
func (in *instruments) refused(ctx context.Context, r throttler.Refusal) {
	kv := in.rec.attrs[:len(in.rec.attrs):len(in.rec.attrs)]
	if in.rec.keyAttr {
		kv = append(kv, KeyAttribute.String(r.Throttler.Key()))
	}
	kv = append(kv,
		semconv.HTTPResponseStatusCodeKey.Int(r.StatusCode),
		VerdictAttribute.String(verdictName(r.Verdict)),
		RetryAttribute.Bool(r.Retry))
	in.transport.refusals.Add(ctx, 1, metric.WithAttributes(kv...))
	in.traceRefusal(ctx, r, in.rec.attrs)
}
