package throttlerotel

import (
	"context"
	"time"
	"weak"

	"go.opentelemetry.io/otel/metric"

	"github.com/go-throttler/throttler"
)

// observeStats registers the asynchronous instruments that read t's Stats
// at each collection, for what no event reports. The callback holds t
// weakly: the instrumentation does not keep a Throttler alive, and one
// collected reports nothing more.
func (in *instruments) observeStats(t *throttler.Throttler, a *metricAttrs) error {
	m := in.meter
	var (
		roundTrips, refused, lateWakes, heals metric.Int64ObservableCounter
		limit                                 metric.Int64ObservableGauge
		paused                                metric.Float64ObservableGauge
		err                                   error
	)
	for _, c := range []struct {
		dst               *metric.Int64ObservableCounter
		name, unit, about string
	}{
		{&roundTrips, "throttler.redis.round_trips", "{round_trip}", "Reservation round trips that reached Redis."},
		{&refused, "throttler.allow.refusals", "{call}", "AllowN calls that answered Allowed: false."},
		{&lateWakes, "throttler.late_wakes", "{wake}", "Calls that gave their slot back and reserved again because they were woken too late."},
		{&heals, "throttler.heals", "{heal}", "Times Redis was found to have lost the window, and every process paused until the calls held stopped counting."},
	} {
		if *c.dst, err = m.Int64ObservableCounter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.about)); err != nil {
			return err
		}
	}
	if limit, err = m.Int64ObservableGauge("throttler.limit", metric.WithUnit("{unit}"),
		metric.WithDescription("The first limit in force: New's, or lower while SetLimit or an API's answer lowers it.")); err != nil {
		return err
	}
	if paused, err = m.Float64ObservableGauge("throttler.pause.remaining", metric.WithUnit("s"),
		metric.WithDescription("Time left of the shared pause in force; 0 when none.")); err != nil {
		return err
	}
	ref := weak.Make(t)
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t := ref.Value()
		if t == nil {
			return nil
		}
		s := t.Stats()
		o.ObserveInt64(roundTrips, int64(s.RoundTrips), a.base)
		o.ObserveInt64(refused, int64(s.Refused), a.base)
		o.ObserveInt64(lateWakes, int64(s.LateWakes), a.base)
		o.ObserveInt64(heals, int64(s.Heals), a.base)
		o.ObserveInt64(limit, int64(s.Limit), a.base)
		left := 0.0
		if !s.PausedUntil.IsZero() {
			left = max(0, time.Until(s.PausedUntil).Seconds())
		}
		o.ObserveFloat64(paused, left, a.base)
		return nil
	}, roundTrips, refused, lateWakes, heals, limit, paused)
	return err
}
