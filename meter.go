package throttler

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// meter counts what Stats reports, passes each event to the Observers
// (WithObserver, AddObserver), and logs Redis's failures: a Throttler's one
// place for what it reports.
type meter struct {
	statCounters
	rejected [numRejections]atomic.Uint64
	// obs holds the Observers given, joined into one (see
	// Throttler.AddObserver); nil when none was given.
	obs atomic.Pointer[Observer]
	// inFlightMu orders the reports of InFlight (see Observer.InFlight);
	// taken only while an Observer has InFlight set.
	inFlightMu sync.Mutex

	// sendDelay counts how long after their slots calls' connections
	// came, and watch tells when that keeps costing new slots (see
	// sendgate.go).
	sendDelay delayCounts
	watch     sendWatch

	// tenants counts the waits admitted by tenant (see tenantstats.go).
	tenants tenantTable

	logger   *slog.Logger
	logAttrs []any     // the Throttler's key and failure policy
	lastLog  time.Time // the last Redis failure logged; under the Throttler's mu
}

// logRedis logs a Redis failure, err, and what follows from it (then), at
// most once a second; now is the Throttler's clock. The caller holds the
// Throttler's mu.
func (m *meter) logRedis(now time.Time, err error, then string) {
	if now.Sub(m.lastLog) < time.Second {
		return
	}
	m.lastLog = now
	m.logger.Warn("throttler: redis failed", append(m.logAttrs[:len(m.logAttrs):len(m.logAttrs)], slog.String("then", then), slog.Any("err", err))...)
}

// statCounters are the Stats counters that are not state, grouped by what
// they count.
type statCounters struct {
	callCounts
	redisCounts
	costCounts
	sendCounts
	shadowCounts
}

// callCounts count the calls by how their waits ended.
type callCounts struct {
	admitted, waits, abandoned, failed, refused atomic.Uint64
	placeWaits                                  atomic.Uint64
	lateWakes                                   atomic.Uint64
	inFlight                                    atomic.Int64
	waited                                      atomic.Int64 // nanoseconds
}

// redisCounts count the round trips and what they met.
type redisCounts struct {
	roundTrips, redisErrors, roundsRetried atomic.Uint64
	pauses, heals                          atomic.Uint64
}

// costCounts count the units settles corrected (see Permit.Settle).
type costCounts struct {
	settled, returned, debt atomic.Uint64
}

// sendCounts count the calls a Transport held at their connections (see
// sendgate.go).
type sendCounts struct {
	reslotted, sentLate atomic.Uint64
}

// placeWait counts a call that found every place in flight taken.
func (m *meter) placeWait() {
	m.placeWaits.Add(1)
	if o := m.obs.Load(); o != nil && o.PlaceWait != nil {
		o.PlaceWait()
	}
}

// inFlightBy counts a place taken (+1) or given back (-1). While an
// Observer has InFlight set, the count changes and is reported under
// inFlightMu, so that the reports come in the order of the changes.
func (m *meter) inFlightBy(delta int64) {
	o := m.obs.Load()
	if o == nil || o.InFlight == nil {
		m.inFlight.Add(delta)
		return
	}
	m.inFlightMu.Lock()
	defer m.inFlightMu.Unlock()
	o.InFlight(int(m.inFlight.Add(delta)))
}

// redisError counts a Redis call that failed or timed out.
func (m *meter) redisError(err error) {
	m.redisErrors.Add(1)
	if o := m.obs.Load(); o != nil && o.RedisError != nil {
		o.RedisError(err)
	}
}

// wait counts the outcome of a wait for n units (any face) that the caller
// began at start with ctx and that returned err at end (both on the
// Throttler's clock), and reports it to the Observers. A wait without a
// tenant costs one context lookup more than it did without tenants: no
// lock, map or allocation.
func (m *meter) wait(ctx context.Context, n int, start, end time.Time, err error) {
	o := m.obs.Load()
	waited := end.Sub(start)
	tenant, _ := TenantFromContext(ctx)
	switch {
	case err == nil:
		m.admitted.Add(uint64(n))
		m.waits.Add(1)
		m.waited.Add(int64(waited))
		if tenant != "" {
			m.tenants.admitted(tenant, n, waited, end)
		}
		if o != nil && o.Admitted != nil {
			o.Admitted(n, waited)
		}
	case isRedis(err):
		m.failed.Add(1)
	case isInvalid(err):
	default:
		why, ok := RejectionOf(err)
		if !ok || why == RejectedDeadline {
			m.abandoned.Add(1)
		}
		if ok {
			m.rejected[why].Add(1)
			if o != nil && o.Rejected != nil {
				o.Rejected(why)
			}
		}
	}
	if o != nil && o.Waited != nil {
		o.Waited(ctx, WaitInfo{N: n, Tenant: tenant, Start: start, End: end, Err: err})
	}
}

// allowed counts n calls AllowN admitted.
func (m *meter) allowed(n int) {
	m.admitted.Add(uint64(n))
	if o := m.obs.Load(); o != nil && o.Admitted != nil {
		o.Admitted(n, 0)
	}
}

// paused counts a shared pause set or learned of, until the local time end.
func (m *meter) paused(end time.Time) {
	m.pauses.Add(1)
	if o := m.obs.Load(); o != nil && o.Paused != nil {
		o.Paused(end)
	}
}

// limitChanged tells the observer the first limit in force is now n.
func (m *meter) limitChanged(n int) {
	if o := m.obs.Load(); o != nil && o.LimitChanged != nil {
		o.LimitChanged(n)
	}
}

// degraded tells the observer calls began (true) or stopped (false)
// following the failure policy.
func (m *meter) degraded(on bool) {
	if o := m.obs.Load(); o != nil && o.Degraded != nil {
		o.Degraded(on)
	}
}

// settle counts a permit settled with its estimate and actual use.
func (m *meter) settle(estimate, actual int) {
	m.settled.Add(1)
	if o := m.obs.Load(); o != nil && o.Settled != nil {
		o.Settled(estimate, actual)
	}
}
