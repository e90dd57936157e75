package throttler

import (
	"context"
	"fmt"
	"time"
)

// Stats is a snapshot of a Throttler's counters and state, taken by Stats.
// Counters start at zero when the Throttler is created and only grow;
// PausedUntil, LimitNow, Places.InFlight, Redis.Degraded, Redis.ClockError
// and Redis.Margin are state. All are this process's view, not the key's
// (Usage reads the key).
//
// A wait below is one of every face that waits for quota: WaitN (and
// Wait), Acquire, Do, DoCost, Wrap, WrapCost and a request through a
// Transport.
type Stats struct {
	// Admitted is how many calls were admitted (a wait or an AllowN of n
	// counts n), whether Redis or the failure policy admitted them.
	Admitted uint64
	// Waited is the total time the waits counted in Waits took, from the
	// call to its return: divided by Waits, it is the mean wait.
	Waited time.Duration
	// Waits is how many waits were admitted.
	Waits uint64
	// Abandoned is how many waits returned because their context ended or
	// its deadline came before their slot (a wait WithMaxWait ended counts
	// in Rejected only).
	Abandoned uint64
	// Failed is how many waits and AllowN calls returned an error wrapping
	// ErrRedis.
	Failed uint64
	// Denied is how many AllowN calls answered Allowed: false.
	Denied uint64
	// Rejected counts the waits turned away, by Rejection: their
	// slot lay past their deadline or their maximum wait, or the queue
	// was full. Those past their deadline count in Abandoned too.
	Rejected [numRejections]uint64

	// Pauses is how many shared pauses this Throttler set or learned of;
	// PausedUntil is the end of the one in force as this Throttler knows
	// it, zero when none is.
	Pauses      uint64
	PausedUntil time.Time
	// LimitNow is the first limit in force: New's, or lower while
	// LowerLimit (or a Transport reading the API's limit) has lowered it.
	LimitNow int

	Costs   CostStats   // costs settled after the call (Permit.Settle)
	Places  PlaceStats  // places in flight (WithInFlight)
	Sends   SendStats   // when calls went, against their slots
	Redis   RedisStats  // the round trips, and the state of the shared window
	Tenants TenantStats // the waits admitted, by tenant (ContextWithTenant), for at most 100 tenants
	Shadow  ShadowStats // what shadow mode (WithShadow) would have done
}

// CostStats count the permits settled (see Permit.Settle).
type CostStats struct {
	// Settled is how many permits were settled; Returned is how many units
	// their surpluses gave back in Redis, and Debt how many their excesses
	// added (a permit admitted without Redis adds to neither, nor does a
	// call written off its slot, whose units count as debt where it went:
	// see Stats.Sends.SentLate; an excess above the largest limit adds the
	// largest limit, see Permit.Settle).
	Settled, Returned, Debt uint64
}

// PlaceStats count the places in flight (see WithInFlight).
type PlaceStats struct {
	// InFlight is how many calls of this process hold a place in flight
	// now; Waits how many times a call found no place free and waited for
	// one.
	InFlight int
	Waits    uint64
}

// SendStats say when calls went, against their slots.
type SendStats struct {
	// Delay is how long after their slots calls' connections came, for
	// the calls sent through net/http by a Transport, or by Do, DoCost,
	// Wrap or WrapCost with the context they pass (see Transport): the
	// dial and the wait for a pooled connection are there. A connection
	// later than the slot allows (half the buffer, see WithBuffer) costs
	// the call a new slot (Reslotted); delays near or past half the
	// buffer call for a larger pool in the base transport, or a longer
	// buffer.
	Delay Histogram
	// Reslotted is how many of those calls took a new slot at their
	// connection, which came later than their slot allowed, or for a
	// second write of their request (see SendInfo.Rewritten); SentLate how
	// many were written later than their slot allowed all the same (see
	// SendInfo.Late: those that could not wait for a new slot count as
	// debt where they went, which CostStats.Debt leaves out).
	Reslotted, SentLate uint64
	// LateWakes is how many calls gave their slot back and reserved again
	// because they were woken too late (see WaitN).
	LateWakes uint64
}

// RedisStats count the round trips to Redis, and say what this process
// knows of the shared window.
type RedisStats struct {
	// RoundTrips is how many reservation round trips reached Redis; Errors
	// how many Redis calls failed or timed out; RoundsRetried how many
	// reservation round trips failed on a broken connection and were sent
	// again (see WithRedisTimeout).
	RoundTrips, Errors, RoundsRetried uint64
	// Heals is how many times this Throttler found that Redis had lost the
	// window, and paused every process until the calls it held stopped
	// counting.
	Heals uint64
	// Degraded reports that Redis failed recently and calls follow the
	// failure policy (FailOpen or FallbackLocal) instead of Redis.
	Degraded bool
	// ClockError bounds the error of this process's estimate of the Redis
	// server's clock: half the shortest of its recent round trips, plus
	// 2µs for rounding. Before the first sample the estimate is the local
	// clock, and ClockError means nothing.
	// Margin is how much wider than interval + buffer, each way, the last
	// round trip counted its calls' neighbourhoods: zero unless a clock
	// error past a quarter of the buffer, here or on another replica, or
	// calls woken late, asked for a margin (see WithBuffer).
	ClockError, Margin time.Duration
}

// Stats returns a snapshot of t's counters and state. It takes no Redis
// round trip and is cheap enough to call on every metrics scrape. The
// tenants it shows in Tenants.ByTenant may give their places to new
// tenants from then on (see TenantStats).
func (t *Throttler) Stats() Stats {
	if t == nil || t.st == nil {
		return Stats{}
	}
	s := Stats{
		Admitted:  t.stats.admitted.Load(),
		Waited:    time.Duration(t.stats.waited.Load()),
		Waits:     t.stats.waits.Load(),
		Abandoned: t.stats.abandoned.Load(),
		Failed:    t.stats.failed.Load(),
		Denied:    t.stats.refused.Load(),
		Pauses:    t.stats.pauses.Load(),
		Costs:     CostStats{Settled: t.stats.settled.Load(), Returned: t.stats.returned.Load(), Debt: t.stats.debt.Load()},
		Places:    PlaceStats{InFlight: int(t.stats.inFlight.Load()), Waits: t.stats.placeWaits.Load()},
		Sends: SendStats{Delay: t.stats.sendDelay.snapshot(), Reslotted: t.stats.reslotted.Load(),
			SentLate: t.stats.sentLate.Load(), LateWakes: t.stats.lateWakes.Load()},
		Redis: RedisStats{RoundTrips: t.stats.roundTrips.Load(), Errors: t.stats.redisErrors.Load(),
			RoundsRetried: t.stats.roundsRetried.Load(), Heals: t.stats.heals.Load()},
	}
	for i := range s.Rejected {
		s.Rejected[i] = t.stats.rejected[i].Load()
	}
	s.Tenants = t.stats.tenants.snapshot(t.now())
	s.Shadow = t.stats.shadowCounts.snapshot()
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	serverNow := t.clock.Server(now)
	if t.shared.pausedTill > serverNow {
		s.PausedUntil = t.clock.Local(t.shared.pausedTill)
	}
	var lims [1]int
	s.LimitNow = t.shared.limits(t.rules.Wins, serverNow, lims[:0])[0]
	s.Redis.Degraded = t.fallback.isDegraded()
	s.Redis.ClockError = time.Duration(t.clock.View().ErrBound()) * time.Microsecond
	s.Redis.Margin = time.Duration(t.upkeep.widen) * time.Microsecond
	return s
}

// Observer receives a Throttler's events as they happen. Set the fields
// you need; nil fields cost nothing. The functions are called
// synchronously, on the goroutine where the event happens (a caller's, one
// of the Throttler's own, or for Sent the one net/http writes the request
// on), sometimes while the Throttler holds its internal lock: they must
// return quickly and must not call the Throttler's methods. Counting,
// recording a histogram sample or logging is fine. Give one with
// WithObserver, or add any number to a Throttler in use with
// Throttler.AddObserver (and to a Group's with Group.AddObserver).
type Observer struct {
	// Admitted is called when a wait (see Stats) or an AllowN call admits
	// n calls, with how long the caller waited (zero for AllowN): on the
	// caller's goroutine, without the Throttler's lock, as the call
	// returns, which may be well after Redis admitted it (a sleep toward a
	// slot reserved ahead).
	Admitted func(n int, waited time.Duration)
	// Paused is called when the Throttler sets or learns of a shared pause
	// (PauseUntil, a Transport following a refusal or a counter at zero,
	// a heal, or another replica's), with its end.
	Paused func(until time.Time)
	// LimitChanged is called, with the new limit, when a lowering of the
	// first limit is set or ended, by this process (LowerLimit, a Transport,
	// Group.Learn) or by another, as this one learns through Redis; not
	// when a lowering runs out at its end (Stats.LimitNow shows that).
	LimitChanged func(limit int)
	// RedisError is called for every Redis call that failed or timed out.
	RedisError func(err error)
	// Settled is called when a permit is settled (see Permit.Settle), with
	// its estimate and its actual cost.
	Settled func(estimate, actual int)
	// InFlight is called with this process's calls in flight (see
	// WithInFlight) each time the number changes: a call took a place, or
	// gave it back. Its calls are serialized, in the order of the changes
	// they report, so that each n is the number in flight at its change,
	// and the differences between the numbers an Observer is given add up
	// to the last one (its first call reports the number then, whatever
	// changes came before it). Once the changes under way when it was
	// added have ended, each n is one more or one less than the one
	// before.
	InFlight func(n int)
	// PlaceWait is called each time a call finds every place in flight
	// taken and waits for one.
	PlaceWait func()
	// Rejected is called each time a wait (see Stats) is turned away, with
	// why: on the caller's goroutine, without the Throttler's lock, as the
	// wait returns.
	Rejected func(why Rejection)
	// Degraded is called with true when Redis fails and calls start to
	// follow the FailOpen or FallbackLocal policy, and with false once a
	// round trip reaches Redis again. Its calls are serialized and
	// alternate, the first with true: an Observer added (AddObserver) while
	// calls follow the policy is called with true as it is added. A
	// Throttler nobody calls any more reports no false: Stats.Redis.Degraded
	// tells whether calls follow the policy now.
	Degraded func(on bool)
	// Waited is called once for each wait (see Stats) as it returns,
	// whatever its outcome: admitted, turned away (see RejectionOf),
	// abandoned, failed, or refused as bad input (but for a nil Context,
	// which it could not be given). It is called on the caller's
	// goroutine, once the wait has done all it does and without the
	// Throttler's lock, with the context the caller gave the wait (the
	// request's for a Transport), so that it may record the wait on the
	// caller's trace. For an admitted wait it comes after Admitted; for a
	// wait turned away, after Rejected.
	Waited func(ctx context.Context, w WaitInfo)
	// Sent is called once for each call sent through net/http by a
	// Transport, or by Do, DoCost, Wrap or WrapCost with the context they
	// pass, as its request is written (see SendInfo), on the goroutine
	// that writes it.
	Sent func(s SendInfo)
	// Shadowed is called, in shadow mode (WithShadow), once for each call
	// let go at once, with what enforcement would have done with it (see
	// ShadowInfo), on the caller's goroutine, without the Throttler's
	// lock, before the wait's Admitted and Waited.
	Shadowed func(ctx context.Context, s ShadowInfo)
}

// WithObserver sets the functions that receive t's events, in place of
// those an earlier WithObserver set. Default none. Throttler.AddObserver
// adds more to a Throttler in use.
func WithObserver(o Observer) Option {
	return func(opts *options) error {
		opts.observer = &o
		return nil
	}
}

// Rejection is why a wait (see Stats) was turned away without its slot.
type Rejection uint8

const (
	// RejectedDeadline: the earliest slot it could get lay past its
	// context's deadline.
	RejectedDeadline Rejection = iota
	// RejectedMaxWait: its slot lay past its maximum wait, or the wait
	// passed before it got one (see WithMaxWait).
	RejectedMaxWait
	// RejectedQueueFull: it found WithMaxQueue's bound reached and no call
	// of a lower priority to shed.
	RejectedQueueFull
	// RejectedShed: a call of a higher priority shed it from a full queue.
	RejectedShed

	numRejections = 4
)

// String returns "deadline", "max wait", "queue full" or "shed".
func (r Rejection) String() string {
	switch r {
	case RejectedDeadline:
		return "deadline"
	case RejectedMaxWait:
		return "max wait"
	case RejectedQueueFull:
		return "queue full"
	case RejectedShed:
		return "shed"
	}
	return fmt.Sprintf("Rejection(%d)", uint8(r))
}
