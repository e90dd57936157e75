package throttlerotel

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/go-throttler/throttler"
)

// lastInstance is the last throttler.instance.id given (see
// InstanceAttribute).
var lastInstance atomic.Int64

// asyncAttrs returns the attributes of what is read at collection for a
// Throttler whose own attributes are base: base and in.instance, which no
// other registration of this process observes, so that no two observe
// the same attributes.
func (in *instruments) asyncAttrs(base []attribute.KeyValue) attribute.Set {
	kv := append(base[:len(base):len(base)], InstanceAttribute.Int64(in.instance))
	return attribute.NewSet(kv...)
}

// statInstruments are the asynchronous instruments read from a Throttler's
// Stats at each collection.
type statInstruments struct {
	roundTrips, allowDenials, lateWakes, heals metric.Int64ObservableCounter
	resent                                     metric.Int64ObservableCounter
	limit                                      metric.Int64ObservableGauge
	pauseRemaining                             metric.Float64ObservableGauge
	degraded                                   metric.Int64ObservableUpDownCounter
}

// newDegraded makes throttler.degraded.
func newDegraded(m metric.Meter) (metric.Int64ObservableUpDownCounter, error) {
	return m.Int64ObservableUpDownCounter("throttler.degraded", metric.WithUnit("{throttler}"),
		metric.WithDescription("Throttlers whose calls follow the failure policy now, because Redis failed (Stats.Redis.Degraded)."))
}

func newStatInstruments(m metric.Meter) (*statInstruments, error) {
	si := &statInstruments{}
	var err error
	for _, c := range []struct {
		dst               *metric.Int64ObservableCounter
		name, unit, about string
	}{
		{&si.roundTrips, "throttler.redis.round_trips", "{round_trip}", "Reservation round trips that reached Redis."},
		{&si.allowDenials, "throttler.allow.denials", "{call}", "AllowN calls that answered Allowed: false."},
		{&si.lateWakes, "throttler.late_wakes", "{wake}", "Calls that gave their slot back and reserved again because they were woken too late."},
		{&si.heals, "throttler.heals", "{heal}", "Times Redis was found to have lost the window, and every process paused until the calls held stopped counting."},
		{&si.resent, "throttler.redis.round_trips.resent", "{round_trip}", "Reservation round trips that failed on their connection, or on a server state that passes, and were sent again (Stats.Redis.RoundsRetried)."},
	} {
		if *c.dst, err = m.Int64ObservableCounter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.about)); err != nil {
			return nil, err
		}
	}
	if si.limit, err = m.Int64ObservableGauge("throttler.limit", metric.WithUnit("{unit}"),
		metric.WithDescription("The first limit in force: New's, or lower while LowerLimit or an API's answer lowers it.")); err != nil {
		return nil, err
	}
	if si.pauseRemaining, err = m.Float64ObservableGauge("throttler.pause.remaining", metric.WithUnit("s"),
		metric.WithDescription("Time left of the shared pause in force; 0 when none.")); err != nil {
		return nil, err
	}
	if si.degraded, err = newDegraded(m); err != nil {
		return nil, err
	}
	return si, nil
}

// observeStats registers the asynchronous instruments that read t's Stats
// at each collection, for what no event reports, with the attributes of
// asyncAttrs(base). The callback holds t weakly: the instrumentation does
// not keep a Throttler alive, and once t is collected its registration is
// undone.
func (in *instruments) observeStats(t *throttler.Throttler, base []attribute.KeyValue) error {
	si, err := newStatInstruments(in.meter)
	if err != nil {
		return err
	}
	attrs := metric.WithAttributeSet(in.asyncAttrs(base))
	ref := weak.Make(t)
	reg, err := in.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t := ref.Value()
		if t == nil {
			return nil // collected: its registration is being undone
		}
		s := t.Stats()
		o.ObserveInt64(si.roundTrips, int64(s.Redis.RoundTrips), attrs)
		o.ObserveInt64(si.allowDenials, int64(s.Denied), attrs)
		o.ObserveInt64(si.lateWakes, int64(s.Sends.LateWakes), attrs)
		o.ObserveInt64(si.heals, int64(s.Redis.Heals), attrs)
		o.ObserveInt64(si.resent, int64(s.Redis.RoundsRetried), attrs)
		o.ObserveInt64(si.limit, int64(s.LimitNow), attrs)
		left := 0.0
		if !s.PausedUntil.IsZero() {
			left = max(0, time.Until(s.PausedUntil).Seconds())
		}
		o.ObserveFloat64(si.pauseRemaining, left, attrs)
		o.ObserveInt64(si.degraded, count(s.Redis.Degraded), attrs)
		return nil
	}, si.roundTrips, si.allowDenials, si.lateWakes, si.heals, si.resent, si.limit, si.pauseRemaining, si.degraded)
	if err != nil {
		return err
	}
	unregisterWhenCollected(t, reg)
	return nil
}

// unregisterWhenCollected undoes reg once owner has been garbage
// collected: a registration outlives nothing it reads. The error of
// Unregister, which has no caller to return to, goes to OpenTelemetry's
// error handler (otel.Handle).
func unregisterWhenCollected[T any](owner *T, reg metric.Registration) {
	runtime.AddCleanup(owner, func(reg metric.Registration) {
		if err := reg.Unregister(); err != nil {
			otel.Handle(err)
		}
	}, reg)
}

// count is 1 for true, 0 for false.
func count(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// degradedSet reads throttler.degraded for a Group at each collection:
// how many of its Throttlers are degraded (Stats.Redis.Degraded). It holds,
// weakly, every Throttler reported degraded (Observer.Degraded) that is
// still alive, the Group's or one it evicted, for an evicted Throttler
// reports no Degraded(false) (nobody calls it), but its Stats tell.
type degradedSet struct {
	in   *instruments
	inst metric.Int64ObservableUpDownCounter

	mu sync.Mutex
	// The Throttlers reported degraded, with the attributes of their
	// measurements (asyncAttrs); without a key attribute, only those not
	// reported recovered since.
	throttlers map[weak.Pointer[throttler.Throttler]]attribute.Set
	// shared, when the Throttlers carry no key, is the attributes of them
	// all: observed at each collection, 0 when none is degraded.
	shared *attribute.Set
}

// observeDegraded registers the callback that reads throttler.degraded
// for g, and returns the set it reads. The registration is undone once g
// has been garbage collected.
func (in *instruments) observeDegraded(g *throttler.Group) (*degradedSet, error) {
	inst, err := newDegraded(in.meter)
	if err != nil {
		return nil, err
	}
	d := &degradedSet{in: in, inst: inst, throttlers: map[weak.Pointer[throttler.Throttler]]attribute.Set{}}
	if in.shared != nil {
		set := in.asyncAttrs(in.shared.kv)
		d.shared = &set
	}
	reg, err := in.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		d.observe(o)
		return nil
	}, inst)
	if err != nil {
		return nil, err
	}
	unregisterWhenCollected(g, reg)
	return d, nil
}

// reported notes that t, whose measurements have the attributes ma,
// reported Degraded(on). It runs under t's lock: it takes only d's.
func (d *degradedSet) reported(t *throttler.Throttler, ma *metricAttrs, on bool) {
	p := weak.Make(t)
	d.mu.Lock()
	defer d.mu.Unlock()
	_, known := d.throttlers[p]
	switch {
	case on && !known && d.shared != nil:
		d.throttlers[p] = *d.shared
	case on && !known:
		d.throttlers[p] = d.in.asyncAttrs(ma.kv)
	case !on && d.shared != nil:
		// Observed with the others anyway; with a key, t's stream stays,
		// at 0, while t lives.
		delete(d.throttlers, p)
	}
}

// observe observes, for each set of attributes, how many of d's live
// Throttlers are degraded now.
func (d *degradedSet) observe(o metric.Observer) {
	type held struct {
		t   *throttler.Throttler
		set attribute.Set
	}
	d.mu.Lock()
	live := make([]held, 0, len(d.throttlers))
	for p, set := range d.throttlers {
		if t := p.Value(); t != nil {
			live = append(live, held{t, set})
		} else {
			delete(d.throttlers, p)
		}
	}
	d.mu.Unlock()
	// Stats takes each Throttler's lock, under which Degraded is reported:
	// not under d.mu.
	type sum struct {
		set attribute.Set
		n   int64
	}
	sums := map[attribute.Distinct]*sum{}
	if d.shared != nil {
		sums[d.shared.Equivalent()] = &sum{set: *d.shared}
	}
	for _, h := range live {
		s := sums[h.set.Equivalent()]
		if s == nil {
			s = &sum{set: h.set}
			sums[h.set.Equivalent()] = s
		}
		s.n += count(h.t.Stats().Redis.Degraded)
	}
	for _, s := range sums {
		o.ObserveInt64(d.inst, s.n, metric.WithAttributeSet(s.set))
	}
}
