package throttlerotel

import (
	"context"
	"runtime"
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
	roundTrips, allowRefusals, lateWakes, heals metric.Int64ObservableCounter
	limit                                       metric.Int64ObservableGauge
	pauseRemaining                              metric.Float64ObservableGauge
}

func newStatInstruments(m metric.Meter) (*statInstruments, error) {
	si := &statInstruments{}
	var err error
	for _, c := range []struct {
		dst               *metric.Int64ObservableCounter
		name, unit, about string
	}{
		{&si.roundTrips, "throttler.redis.round_trips", "{round_trip}", "Reservation round trips that reached Redis."},
		{&si.allowRefusals, "throttler.allow.refusals", "{call}", "AllowN calls that answered Allowed: false."},
		{&si.lateWakes, "throttler.late_wakes", "{wake}", "Calls that gave their slot back and reserved again because they were woken too late."},
		{&si.heals, "throttler.heals", "{heal}", "Times Redis was found to have lost the window, and every process paused until the calls held stopped counting."},
	} {
		if *c.dst, err = m.Int64ObservableCounter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.about)); err != nil {
			return nil, err
		}
	}
	if si.limit, err = m.Int64ObservableGauge("throttler.limit", metric.WithUnit("{unit}"),
		metric.WithDescription("The first limit in force: New's, or lower while SetLimit or an API's answer lowers it.")); err != nil {
		return nil, err
	}
	if si.pauseRemaining, err = m.Float64ObservableGauge("throttler.pause.remaining", metric.WithUnit("s"),
		metric.WithDescription("Time left of the shared pause in force; 0 when none.")); err != nil {
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
		o.ObserveInt64(si.roundTrips, int64(s.RoundTrips), attrs)
		o.ObserveInt64(si.allowRefusals, int64(s.Refused), attrs)
		o.ObserveInt64(si.lateWakes, int64(s.LateWakes), attrs)
		o.ObserveInt64(si.heals, int64(s.Heals), attrs)
		o.ObserveInt64(si.limit, int64(s.Limit), attrs)
		left := 0.0
		if !s.PausedUntil.IsZero() {
			left = max(0, time.Until(s.PausedUntil).Seconds())
		}
		o.ObserveFloat64(si.pauseRemaining, left, attrs)
		return nil
	}, si.roundTrips, si.allowRefusals, si.lateWakes, si.heals, si.limit, si.pauseRemaining)
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
