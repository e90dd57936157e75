package main

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/go-throttler/throttler"
)

// newRedis returns a client of a fresh miniredis, closed with the test.
func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// gather gathers reg and returns its metrics by family name and then by
// their key label.
func gather(t *testing.T, reg *prometheus.Registry) map[string]map[string]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]map[string]*dto.Metric{}
	for _, mf := range mfs {
		byKey := map[string]*dto.Metric{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "key" {
					byKey[l.GetValue()] = m
				}
			}
		}
		out[mf.GetName()] = byKey
	}
	return out
}

// value returns the value of a counter or gauge.
func value(t *testing.T, got map[string]map[string]*dto.Metric, name, key string) float64 {
	t.Helper()
	m, ok := got[name][key]
	if !ok {
		t.Fatalf("no %s{key=%q} gathered", name, key)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s{key=%q} is neither a counter nor a gauge", name, key)
	return 0
}

// The Collector and the WaitHistogram export exactly what the Throttler did:
// 5 Allow and 3 Wait admitted (the histogram has a sample of 0 for each
// Allow and one of its wait for each Wait), then a one-minute pause, during
// which one more Allow is refused (no sample: it admitted nothing).
func TestCollector(t *testing.T) {
	ctx := context.Background()
	const key, limit = "test-api", 50
	hist := NewWaitHistogram()
	th, err := throttler.New(newRedis(t), key, limit, time.Second, throttler.WithObserver(hist.Observer(key)))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(th), hist)

	for i := range 5 {
		if res, err := th.Allow(ctx); err != nil || !res.Allowed {
			t.Fatalf("Allow #%d = %+v, %v; want allowed", i+1, res, err)
		}
	}
	for i := range 3 {
		if err := th.Wait(ctx); err != nil {
			t.Fatalf("Wait #%d: %v", i+1, err)
		}
	}
	pausedAt := time.Now()
	if err := th.PauseUntil(ctx, pausedAt.Add(time.Minute)); err != nil {
		t.Fatalf("PauseUntil: %v", err)
	}
	if res, err := th.Allow(ctx); err != nil || res.Allowed {
		t.Fatalf("Allow during the pause = %+v, %v; want refused", res, err)
	}

	got := gather(t, reg)
	stats := th.Stats()
	exact := map[string]float64{
		"throttler_admitted_total":     8,
		"throttler_waits_total":        3,
		"throttler_denied_total":       1,
		"throttler_abandoned_total":    0,
		"throttler_failed_total":       0,
		"throttler_redis_errors_total": 0,
		"throttler_heals_total":        0,
		"throttler_late_wakes_total":   0,
		"throttler_settled_total":      0,
		"throttler_in_flight":          0,
		"throttler_place_waits_total":  0,
		"throttler_pauses_total":       1,
		"throttler_limit":              limit,
		"throttler_interval_seconds":   1,
		"throttler_degraded":           0,
	}
	for name, want := range exact {
		if v := value(t, got, name, key); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	// 8 admissions through Redis: at least one round trip, at most one each.
	if v := value(t, got, "throttler_redis_round_trips_total", key); v < 1 || v > 8 {
		t.Errorf("throttler_redis_round_trips_total = %v, want 1..8", v)
	}
	if v, want := value(t, got, "throttler_wait_seconds_total", key), stats.Waited.Seconds(); v != want || v <= 0 {
		t.Errorf("throttler_wait_seconds_total = %v, want Stats().Waited = %v (> 0)", v, want)
	}
	pausedUntil := value(t, got, "throttler_paused_until_seconds", key)
	if lo, hi := unixSeconds(pausedAt.Add(59*time.Second)), unixSeconds(time.Now().Add(61*time.Second)); pausedUntil < lo || pausedUntil > hi {
		t.Errorf("throttler_paused_until_seconds = %.3f, want about a minute from now (%.3f..%.3f)", pausedUntil, lo, hi)
	}

	// The histogram: one sample per admission, as Observer.Admitted reports
	// them: 5 zeros for the Allows, and the 3 Waits' waits, which add up to
	// Stats().Waited.
	m, ok := got["throttler_wait_seconds"][key]
	if !ok || m.Histogram == nil {
		t.Fatalf("no throttler_wait_seconds{key=%q} histogram gathered", key)
	}
	h := m.Histogram
	if n := h.GetSampleCount(); n != 8 {
		t.Errorf("throttler_wait_seconds_count = %d, want 8 (5 Allow + 3 Wait)", n)
	}
	if sum, want := h.GetSampleSum(), stats.Waited.Seconds(); math.Abs(sum-want) > 1e-9 {
		t.Errorf("throttler_wait_seconds_sum = %v, want Stats().Waited = %v", sum, want)
	}
	if b := h.GetBucket(); len(b) == 0 || b[0].GetUpperBound() != 0 || b[0].GetCumulativeCount() != 5 {
		t.Errorf("first bucket = %v, want le=0 holding the 5 Allows", b[:min(1, len(b))])
	}

	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("GatherAndLint = %v, %v; want no problems", problems, err)
	}
}

// One Collector and one WaitHistogram serve several Throttlers, told apart
// by their key label.
func TestCollectorKeys(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t)
	hist := NewWaitHistogram(0.01, 0.1, 1)
	var ths []*throttler.Throttler
	for _, key := range []string{"a", "b"} {
		th, err := throttler.New(rdb, key, 10, time.Second, throttler.WithObserver(hist.Observer(key)))
		if err != nil {
			t.Fatal(err)
		}
		ths = append(ths, th)
	}
	c := NewCollector(ths...)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c, hist)

	for range 2 {
		if err := ths[0].Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := ths[1].WaitN(ctx, 3); err != nil {
		t.Fatal(err)
	}

	got := gather(t, reg)
	for key, want := range map[string]float64{"a": 2, "b": 3} {
		if v := value(t, got, "throttler_admitted_total", key); v != want {
			t.Errorf("throttler_admitted_total{key=%q} = %v, want %v", key, v, want)
		}
	}
	// A WaitN of n is one sample.
	for key, want := range map[string]uint64{"a": 2, "b": 1} {
		if n := got["throttler_wait_seconds"][key].GetHistogram().GetSampleCount(); n != want {
			t.Errorf("throttler_wait_seconds_count{key=%q} = %d, want %d", key, n, want)
		}
	}
	if n, want := testutil.CollectAndCount(c), 2*28; n != want {
		t.Errorf("Collector sent %d metrics, want %d (28 per Throttler)", n, want)
	}
	if v := value(t, got, "throttler_paused_until_seconds", "a"); v != 0 {
		t.Errorf("throttler_paused_until_seconds without a pause = %v, want 0", v)
	}
}

// printFamilies keeps the HELP, TYPE and sample lines of the families with
// the prefix, and nothing else.
func TestPrintFamilies(t *testing.T) {
	in := `# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 7
# HELP throttler_limit The first limit.
# TYPE throttler_limit gauge
throttler_limit{key="x"} 50
`
	var out strings.Builder
	if err := printFamilies(&out, strings.NewReader(in), "throttler_"); err != nil {
		t.Fatal(err)
	}
	want := `# HELP throttler_limit The first limit.
# TYPE throttler_limit gauge
throttler_limit{key="x"} 50
`
	if out.String() != want {
		t.Errorf("printFamilies =\n%s\nwant\n%s", out.String(), want)
	}
}
