package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/go-throttler/throttler"
)

// Collector exports the Stats of one or more Throttlers as Prometheus
// metrics, each labelled with the Throttler's key. It reads Stats at scrape
// time, which takes no Redis round trip, so it adds nothing to the
// Throttlers' work between scrapes.
//
// The Throttlers given to one Collector (and to every Collector registered
// in the same registry) must have distinct keys: two with the same key
// would export the same series twice, which the registry reports as an
// error when it gathers.
//
// Counters are this process's view (see throttler.Stats): sum them across
// replicas to see what the key admitted.
type Collector struct {
	ts []*throttler.Throttler

	admitted, waits, waitSeconds, abandoned, failed, denied *prometheus.Desc
	roundTrips, redisErrors, pauses, heals, lateWakes       *prometheus.Desc
	settled, returned, debt                                 *prometheus.Desc
	inFlight, placeWaits, rejected                          *prometheus.Desc
	sendDelay, reslotted, sentLate, roundsRetried           *prometheus.Desc
	limit, interval, pausedUntil, degraded                  *prometheus.Desc
}

// NewCollector returns a Collector of the Throttlers ts. Register it with a
// prometheus.Registerer; it implements prometheus.Collector.
func NewCollector(ts ...*throttler.Throttler) *Collector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"key"}, nil)
	}
	return &Collector{
		ts: append([]*throttler.Throttler(nil), ts...),

		admitted:    desc("throttler_admitted_total", "Calls admitted (a WaitN or AllowN of n counts n), by Redis or by the failure policy."),
		waits:       desc("throttler_waits_total", "Waits admitted (every face that waits: WaitN, Acquire, Do, a Transport's requests...)."),
		waitSeconds: desc("throttler_wait_seconds_total", "Time admitted callers spent in WaitN; divided by throttler_waits_total it is the mean wait."),
		abandoned:   desc("throttler_abandoned_total", "WaitN calls that returned because their context ended or its deadline came before their slot."),
		failed:      desc("throttler_failed_total", "WaitN and AllowN calls that returned an error wrapping ErrRedis."),
		denied:      desc("throttler_denied_total", "AllowN calls that answered Allowed: false."),
		roundTrips:  desc("throttler_redis_round_trips_total", "Reservation round trips that reached Redis."),
		redisErrors: desc("throttler_redis_errors_total", "Redis calls that failed or timed out."),
		pauses:      desc("throttler_pauses_total", "Shared pauses this Throttler set or learned of."),
		heals:       desc("throttler_heals_total", "Times this Throttler found that Redis had lost the window and paused every process until the calls it held stopped counting."),
		lateWakes:   desc("throttler_late_wakes_total", "Calls that gave their slot back and reserved again because they were woken too late."),
		settled:     desc("throttler_settled_total", "Permits settled with their actual cost (Acquire, Settle)."),
		returned:    desc("throttler_settle_returned_units_total", "Units given back in Redis by permits that cost less than estimated."),
		debt:        desc("throttler_settle_debt_units_total", "Units added as debt in Redis by permits that cost more than estimated."),
		inFlight:    desc("throttler_in_flight", "Calls of this process holding a place in flight (WithInFlight)."),
		placeWaits:  desc("throttler_place_waits_total", "Times a call found every place in flight taken and waited for one."),
		rejected: prometheus.NewDesc("throttler_rejected_total",
			"WaitN calls turned away without their slot, by reason: deadline, max wait, queue full, shed (see throttler.Rejection).",
			[]string{"key", "reason"}, nil),
		sendDelay:     desc("throttler_send_delay_seconds", "How long after their slots calls sent through net/http got their connections (throttler.Stats.Sends.Delay)."),
		reslotted:     desc("throttler_reslotted_total", "Calls whose connection came later than their slot allowed, and that took a new slot for it."),
		sentLate:      desc("throttler_sent_late_total", "Calls written later than their slot allowed all the same."),
		roundsRetried: desc("throttler_redis_round_trips_resent_total", "Reservation round trips sent again after a broken Redis connection."),
		limit:         desc("throttler_limit", "The first limit in force: New's, or lower while LowerLimit or an API's answer lowers it."),
		interval:      desc("throttler_interval_seconds", "The length of the sliding window."),
		pausedUntil:   desc("throttler_paused_until_seconds", "End of the shared pause in force, in Unix seconds; 0 when none."),
		degraded:      desc("throttler_degraded", "1 while Redis has failed recently and calls follow the failure policy, else 0."),
	}
}

// Describe sends the descriptors of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.admitted, c.waits, c.waitSeconds, c.abandoned, c.failed, c.denied,
		c.roundTrips, c.redisErrors, c.pauses, c.heals, c.lateWakes,
		c.settled, c.returned, c.debt, c.inFlight, c.placeWaits, c.rejected,
		c.sendDelay, c.reslotted, c.sentLate, c.roundsRetried,
		c.limit, c.interval, c.pausedUntil, c.degraded,
	} {
		ch <- d
	}
}

// Collect reads each Throttler's Stats and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.ts {
		s := t.Stats()
		key := t.Key()
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, key)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, key)
		}
		counter(c.admitted, float64(s.Admitted))
		counter(c.waits, float64(s.Waits))
		counter(c.waitSeconds, s.Waited.Seconds())
		counter(c.abandoned, float64(s.Abandoned))
		counter(c.failed, float64(s.Failed))
		counter(c.denied, float64(s.Denied))
		counter(c.roundTrips, float64(s.Redis.RoundTrips))
		counter(c.redisErrors, float64(s.Redis.Errors))
		counter(c.pauses, float64(s.Pauses))
		counter(c.heals, float64(s.Redis.Heals))
		counter(c.lateWakes, float64(s.Sends.LateWakes))
		counter(c.settled, float64(s.Costs.Settled))
		counter(c.returned, float64(s.Costs.Returned))
		counter(c.debt, float64(s.Costs.Debt))
		gauge(c.inFlight, float64(s.Places.InFlight))
		counter(c.placeWaits, float64(s.Places.Waits))
		for why, n := range s.Rejected {
			ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(n), key, throttler.Rejection(why).String())
		}
		ch <- sendDelayHistogram(c.sendDelay, s.Sends.Delay, key)
		counter(c.reslotted, float64(s.Sends.Reslotted))
		counter(c.sentLate, float64(s.Sends.SentLate))
		counter(c.roundsRetried, float64(s.Redis.RoundsRetried))
		gauge(c.limit, float64(s.LimitNow))
		gauge(c.interval, t.Interval().Seconds())
		gauge(c.pausedUntil, unixSeconds(s.PausedUntil))
		gauge(c.degraded, boolValue(s.Redis.Degraded))
	}
}

// DefaultWaitBuckets are the buckets NewWaitHistogram uses when given none,
// in seconds. The first, 0, holds AllowN's admissions, which report no
// wait; a WaitN always reports the (however short) time it took.
var DefaultWaitBuckets = []float64{0, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// WaitHistogram is the throttler_wait_seconds histogram, labelled key: how
// long each admitted call waited for its slot. It implements
// prometheus.Collector; register it once and feed it from the Observer of
// each Throttler, which must be set when the Throttler is created:
//
//	h := NewWaitHistogram()
//	reg.MustRegister(h)
//	t, err := throttler.New(rdb, key, limit, interval, throttler.WithObserver(h.Observer(key)))
//
// It records one sample per admission, as Observer.Admitted reports them: a
// WaitN of n is one sample of its wait, and an AllowN that admitted its
// calls is one sample of 0 (AllowN never waits). Denied (AllowN), abandoned and
// failed calls are not admissions and record nothing; see the Collector's
// counters for them.
type WaitHistogram struct {
	vec *prometheus.HistogramVec
}

// NewWaitHistogram returns a WaitHistogram with the given bucket upper
// bounds in seconds, or DefaultWaitBuckets when none are given.
func NewWaitHistogram(buckets ...float64) *WaitHistogram {
	if len(buckets) == 0 {
		buckets = DefaultWaitBuckets
	}
	return &WaitHistogram{vec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "throttler_wait_seconds",
		Help:    "How long each admitted call waited for its slot (0 for AllowN).",
		Buckets: buckets,
	}, []string{"key"})}
}

// Observer returns a throttler.Observer whose Admitted records into the
// histogram under key; pass it to throttler.WithObserver when creating the
// Throttler on that key. Its other fields are nil: set them on the returned
// value to receive the other events too. Admitted is cheap (one histogram
// observation) and never calls the Throttler, as the Observer contract
// requires.
func (h *WaitHistogram) Observer(key string) throttler.Observer {
	o := h.vec.WithLabelValues(key)
	return throttler.Observer{
		Admitted: func(_ int, waited time.Duration) { o.Observe(waited.Seconds()) },
	}
}

// Describe sends the histogram's descriptor.
func (h *WaitHistogram) Describe(ch chan<- *prometheus.Desc) { h.vec.Describe(ch) }

// Collect sends the histogram of every key that recorded a sample.
func (h *WaitHistogram) Collect(ch chan<- prometheus.Metric) { h.vec.Collect(ch) }

// unixSeconds returns t in Unix seconds, or 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// boolValue returns 1 for true and 0 for false.
func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sendDelayHistogram exports h, a Stats histogram, as a Prometheus
// histogram: its buckets are cumulative, in seconds.
func sendDelayHistogram(d *prometheus.Desc, h throttler.Histogram, key string) prometheus.Metric {
	buckets := map[float64]uint64{}
	var cum uint64
	for i, b := range h.Bounds() {
		cum += h.Counts[i]
		buckets[b.Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(d, h.Count(), h.Sum.Seconds(), buckets, key)
}
