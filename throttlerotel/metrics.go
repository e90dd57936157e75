package throttlerotel

import (
	"context"
	"slices"
	"sync"
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
	// InstanceAttribute tells apart, within a process, the registrations
	// that read at collection: a number each call of InstrumentThrottler
	// and InstrumentGroup takes, from 1 up, carried by the measurements
	// read at collection only (those read from Stats, and
	// throttler.degraded). See the package's documentation.
	InstanceAttribute = attribute.Key("throttler.instance.id")
	// SendReslottedAttribute reports whether a call sent through net/http
	// took a new slot at its connection (throttler.SendInfo.Reslotted).
	SendReslottedAttribute = attribute.Key("throttler.send.reslotted")
	// SendLateAttribute reports whether such a call was written later than
	// its slot allows all the same (throttler.SendInfo.Late).
	SendLateAttribute = attribute.Key("throttler.send.late")
)

// instruments are what one Instrument call records with: the meter and
// the tracer, what its Options chose, and the synchronous instruments fed
// by the Observers of Throttlers and Transports, by concern.
type instruments struct {
	meter  metric.Meter
	tracer trace.Tracer
	rec    recording
	// shared are the measurement attributes of every Throttler, made once,
	// when they carry no key (WithKeyAttribute(false)); nil otherwise.
	shared *metricAttrs
	// instance is the throttler.instance.id of what InstrumentThrottler
	// and InstrumentGroup read at collection (see InstanceAttribute).
	instance int64
	// tenants gives the tenants their values of TenantAttribute.
	tenants *tenantValues

	wait      waitInstruments
	quota     quotaInstruments
	inFlight  inFlightInstruments
	settle    settleInstruments
	transport transportInstruments
	send      sendInstruments
	shadow    shadowInstruments
}

// recording is what the Options chose of what is recorded, and how.
type recording struct {
	attrs     []attribute.KeyValue // WithAttributes'
	keyAttr   bool                 // throttler.key on measurements
	tracing   Tracing
	rootSpans bool
}

// waitInstruments record the waits for quota and what they admitted
// (tenantAdmitted: what the waits of tenants admitted, by tenant).
type waitInstruments struct {
	duration       metric.Float64Histogram
	admitted       metric.Int64Counter
	tenantAdmitted metric.Int64Counter
}

// quotaInstruments record what a Throttler learns of the shared quota and
// of Redis.
type quotaInstruments struct {
	pauses, redisErrors metric.Int64Counter
}

// inFlightInstruments record the places in flight (WithInFlight).
type inFlightInstruments struct {
	count metric.Int64UpDownCounter
	waits metric.Int64Counter
}

// settleInstruments record the permits settled with their actual cost,
// and how far that cost lay from their estimate.
type settleInstruments struct {
	permits, overestimate, underestimate metric.Int64Counter
}

// sendInstruments record how late after their slots calls got their
// connections (throttler.SendInfo).
type sendInstruments struct {
	delay metric.Float64Histogram
}

// SendDelayBuckets are throttler.send.delay's bucket bounds, in seconds:
// Stats.Sends.Delay's.
var SendDelayBuckets = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5}

// transportInstruments record what a Transport reads of the API.
type transportInstruments struct {
	refusals metric.Int64Counter
}

// instrumentMaker makes instruments on a meter until one fails, and then
// keeps the first error.
type instrumentMaker struct {
	m   metric.Meter
	err error
}

func (k *instrumentMaker) counter(name, unit, about string) metric.Int64Counter {
	if k.err != nil {
		return nil
	}
	c, err := k.m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(about))
	k.err = err
	return c
}

func (k *instrumentMaker) upDown(name, unit, about string) metric.Int64UpDownCounter {
	if k.err != nil {
		return nil
	}
	c, err := k.m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(about))
	k.err = err
	return c
}

func newInstruments(c *config) (*instruments, error) {
	m := c.mp.Meter(ScopeName,
		metric.WithInstrumentationVersion(Version()), metric.WithSchemaURL(semconv.SchemaURL))
	in := &instruments{
		meter: m,
		tracer: c.tp.Tracer(ScopeName,
			trace.WithInstrumentationVersion(Version()), trace.WithSchemaURL(semconv.SchemaURL)),
		rec:     recording{attrs: c.attrs, keyAttr: c.key, tracing: c.tracing, rootSpans: c.rootSpans},
		tenants: &tenantValues{max: c.maxTenants},
	}
	var err error
	if in.wait.duration, err = m.Float64Histogram("throttler.wait.duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long each wait for quota took, from the call to its return, by outcome (throttler.outcome)."),
		metric.WithExplicitBucketBoundaries(c.buckets...)); err != nil {
		return nil, err
	}
	if in.send.delay, err = m.Float64Histogram("throttler.send.delay",
		metric.WithUnit("s"),
		metric.WithDescription("How long after its slot each call sent through net/http got its connection (throttler.SendInfo.Delay), by whether it took a new slot for it (throttler.send.reslotted) and whether it was written later than its slot allows all the same (throttler.send.late)."),
		metric.WithExplicitBucketBoundaries(SendDelayBuckets...)); err != nil {
		return nil, err
	}
	if in.shadow.wait, err = m.Float64Histogram("throttler.shadow.wait",
		metric.WithUnit("s"),
		metric.WithDescription("In shadow mode (throttler.WithShadow), how long each call let go at once would have waited for room, by what enforcement would have done with it (throttler.shadow.decision)."),
		metric.WithExplicitBucketBoundaries(c.buckets...)); err != nil {
		return nil, err
	}
	k := instrumentMaker{m: m}
	in.wait.admitted = k.counter("throttler.admitted", "{unit}", "Units admitted, by waits and by AllowN: a call for n units (WaitN, Acquire's estimate, AllowN) counts n.")
	in.wait.tenantAdmitted = k.counter("throttler.tenant.admitted", "{unit}", "Units admitted to the waits of tenants (throttler.ContextWithTenant), by tenant (throttler.tenant.id): the first tenants seen, up to WithMaxTenants, each have their own value, and the others share \"other\".")
	in.quota.pauses = k.counter("throttler.pauses", "{pause}", "Shared pauses set or learned of (PauseUntil, an API's Retry-After).")
	in.quota.redisErrors = k.counter("throttler.redis.errors", "{error}", "Redis calls that failed or timed out.")
	in.inFlight.count = k.upDown("throttler.in_flight.count", "{call}", "Calls of this process holding a place in flight (WithInFlight).")
	in.inFlight.waits = k.counter("throttler.in_flight.waits", "{wait}", "Times a call found every place in flight taken and waited for one (WithInFlight).")
	in.settle.permits = k.counter("throttler.settle.permits", "{permit}", "Permits settled with their actual cost (Permit.Settle).")
	in.settle.overestimate = k.counter("throttler.settle.overestimate", "{unit}", "Units by which settled permits' estimates exceeded their actual cost, whether or not they were admitted through Redis.")
	in.settle.underestimate = k.counter("throttler.settle.underestimate", "{unit}", "Units by which settled permits' actual cost exceeded their estimates, whether or not they were admitted through Redis.")
	in.transport.refusals = k.counter("throttler.transport.refusals", "{response}", "Responses a Transport read as a refusal (429, 503...), by status, verdict and whether it retried.")
	if k.err != nil {
		return nil, k.err
	}
	if !in.rec.keyAttr {
		in.shared = in.metricAttrsOf(in.rec.attrs)
	}
	return in, nil
}

// metricAttrs are the attributes of one Throttler's measurements, or of
// every Throttler's when they carry no key, made once.
type metricAttrs struct {
	kv      []attribute.KeyValue // what base holds, not to be modified
	base    metric.MeasurementOption
	outcome [numOutcomes]metric.MeasurementOption
	send    [2][2]metric.MeasurementOption // by reslotted, then late
	shadow  [numShadowDecisions]metric.MeasurementOption
	// tenants holds the attributes of the waits of tenants, by value of
	// TenantAttribute (*tenantAttrs), made at their first wait: at most
	// WithMaxTenants' bound and OtherTenant.
	tenants sync.Map
}

// metricAttrsOf makes the measurement attributes of a Throttler whose own
// attributes are base (WithAttributes', and its key when asked for).
func (in *instruments) metricAttrsOf(base []attribute.KeyValue) *metricAttrs {
	base = base[:len(base):len(base)] // appends below copy
	// attribute.NewSet sorts what it is given in place: base may share
	// in.rec.attrs' array, which others read.
	a := &metricAttrs{kv: base, base: metric.WithAttributeSet(attribute.NewSet(slices.Clone(base)...)), outcome: outcomeAttrs(base), shadow: shadowAttrs(base)}
	for i, reslotted := range []bool{false, true} {
		for j, late := range []bool{false, true} {
			kv := append(base, SendReslottedAttribute.Bool(reslotted), SendLateAttribute.Bool(late))
			a.send[i][j] = metric.WithAttributeSet(attribute.NewSet(kv...))
		}
	}
	return a
}

// outcomeAttrs returns the measurement attributes of the waits of each
// outcome, those of base and the outcome's.
func outcomeAttrs(base []attribute.KeyValue) (out [numOutcomes]metric.MeasurementOption) {
	// attribute.NewSet sorts what it is given in place: each append below
	// must copy base.
	base = base[:len(base):len(base)]
	for o := range numOutcomes {
		kv := append(base, OutcomeAttribute.String(o.String()))
		if o != admitted {
			kv = append(kv, semconv.ErrorTypeKey.String(o.String()))
		}
		out[o] = metric.WithAttributeSet(attribute.NewSet(kv...))
	}
	return out
}

// attrsFor returns the attributes of t's measurements (WithAttributes',
// and t's key when keyAttr says so) and those of its spans and events
// (WithAttributes' and t's key).
func (in *instruments) attrsFor(t *throttler.Throttler) (*metricAttrs, []attribute.KeyValue) {
	attrs := in.rec.attrs[:len(in.rec.attrs):len(in.rec.attrs)]
	withKey := append(attrs, KeyAttribute.String(t.Key()))
	if in.shared != nil {
		return in.shared, withKey
	}
	return in.metricAttrsOf(withKey), withKey
}

// observer returns the Observer that records a Throttler's events in the
// instruments, with the attributes ma on measurements and ta on spans and
// events.
func (in *instruments) observer(ma *metricAttrs, ta []attribute.KeyValue) throttler.Observer {
	var inFlight atomic.Int64 // the last number reported
	bg := context.Background()
	return throttler.Observer{
		Admitted:   func(n int, _ time.Duration) { in.wait.admitted.Add(bg, int64(n), ma.base) },
		Paused:     func(time.Time) { in.quota.pauses.Add(bg, 1, ma.base) },
		RedisError: func(error) { in.quota.redisErrors.Add(bg, 1, ma.base) },
		PlaceWait:  func() { in.inFlight.waits.Add(bg, 1, ma.base) },
		Settled: func(estimate, actual int) {
			in.settle.permits.Add(bg, 1, ma.base)
			if actual < estimate {
				in.settle.overestimate.Add(bg, int64(estimate-actual), ma.base)
			} else if actual > estimate {
				in.settle.underestimate.Add(bg, int64(actual-estimate), ma.base)
			}
		},
		// The reports come in order (see throttler.Observer.InFlight):
		// their differences add up to the number in flight.
		InFlight: func(n int) {
			if d := int64(n) - inFlight.Swap(int64(n)); d != 0 {
				in.inFlight.count.Add(bg, d, ma.base)
			}
		},
		Sent: func(s throttler.SendInfo) {
			in.send.delay.Record(bg, max(0, s.Delay.Seconds()), ma.send[b2i(s.Reslotted)][b2i(s.Late)])
		},
		Waited: func(ctx context.Context, w throttler.WaitInfo) { in.waited(ctx, w, ma, ta) },
		Shadowed: func(ctx context.Context, s throttler.ShadowInfo) {
			in.shadow.wait.Record(ctx, s.Wait.Seconds(), ma.shadow[decisionOf(s)])
		},
	}
}

// waited records w, a wait of a Throttler whose measurements carry ma and
// whose spans and events carry ta, with its tenant, if any, as
// TenantAttribute (bounded on measurements: see WithMaxTenants).
func (in *instruments) waited(ctx context.Context, w throttler.WaitInfo, ma *metricAttrs, ta []attribute.KeyValue) {
	o := outcomeOf(w.Err)
	attrs := ma.outcome[o]
	if w.Tenant != "" {
		t := ma.forTenant(in.tenants.valueOf(w.Tenant))
		attrs = t.outcome[o]
		if o == admitted {
			in.wait.tenantAdmitted.Add(ctx, int64(w.N), t.base)
		}
	}
	in.wait.duration.Record(ctx, w.End.Sub(w.Start).Seconds(), attrs)
	in.traceWait(ctx, w, o, ta)
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
