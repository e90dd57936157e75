package throttler

import (
	"context"
	"sync/atomic"
	"time"
)

// Shadow mode is the first step of a rollout: put the Throttler in front
// of a live call path with WithShadow, read what it would have done, then
// enforce (drop the option). Every face decides as usual and lets the
// call go at once.

// WithShadow puts the Throttler in shadow mode: every wait (Wait, WaitN,
// Acquire, Do, DoCost, Wrap, WrapCost, a Transport's requests) and every
// AllowN decides as it would, records what it would have done, and lets
// the call go at once, without error; it never holds a slot that would
// delay another call.
//
// Each call is counted in the shared window where it goes, now: at the
// slot Redis admits it to when the window has room, else as debt (see
// Permit.Settle), so that the window holds the calls the API sees and
// what each replica would have done follows the traffic. What it would
// have done is how long it would have waited for the room (AllowN's
// RetryAfter, the time until the window as it is would have room for it:
// under enforcement the calls queued ahead of it would wait too, so a
// shadow wait is the least a sustained overload would cost), and whether
// it would have failed: an AllowN refused, or a wait past the call's
// deadline or WithMaxWait. Stats.Shadow counts those, and
// Observer.Shadowed sees each decision; Stats.Admitted and Waited count
// the calls as they went.
//
// Shadow mode enforces nothing: not the limits, not a pause or back-off
// that a Transport learned from the API (those show as waits), not the
// places of WithInFlight, not WithMaxQueue. A call that finds Redis
// failing goes as well, whatever the failure policy, and counts in
// ShadowStats.Errors.
func WithShadow() Option {
	return func(o *options) error {
		o.waits.shadow = true
		return nil
	}
}

// ShadowStats count what a Throttler in shadow mode (WithShadow) would have
// done with the calls it let go at once.
type ShadowStats struct {
	// Calls is how many calls went at once; Waits how many of them would
	// have waited, for Waited in all; Refusals how many would have
	// failed (an AllowN refused, a wait past the call's deadline or
	// WithMaxWait); Errors how many went while Redis failed, undecided.
	Calls, Waits, Refusals, Errors uint64
	Waited                         time.Duration
}

// ShadowInfo is what a Throttler in shadow mode (WithShadow) would have done
// with one call, which went at once: see Observer.Shadowed.
type ShadowInfo struct {
	// N is the units the call asked for, and Tenant its tenant (see
	// WaitInfo).
	N      int
	Tenant string
	// Wait is how long a wait would have waited for room in the window as
	// it was (zero: it would have gone at once). Refused reports that the
	// call would have failed: for a wait, one past its deadline or
	// WithMaxWait, which Why says, as Rejected would have; for an AllowN
	// (Allow set), a refusal (Allowed false), and Why means nothing.
	Wait    time.Duration
	Refused bool
	Why     Rejection
	Allow   bool
	// Err is the Redis failure that left the call undecided, nil when it
	// was decided.
	Err error
}

// shadowed notes what shadow mode would have done with a call, on ctx.
func (m *meter) shadowed(ctx context.Context, s ShadowInfo) {
	m.shadowCalls.Add(1)
	switch {
	case s.Err != nil:
		m.shadowErrors.Add(1)
	case s.Refused:
		m.shadowRefusals.Add(1)
	}
	if s.Wait > 0 {
		m.shadowWaits.Add(1)
		m.shadowWaited.Add(int64(s.Wait))
	}
	if o := m.obs.Load(); o != nil && o.Shadowed != nil {
		s.Tenant, _ = TenantFromContext(ctx)
		o.Shadowed(ctx, s)
	}
}

// shadowCounts are the Stats.Shadow counters.
type shadowCounts struct {
	shadowCalls, shadowWaits, shadowRefusals, shadowErrors atomic.Uint64
	shadowWaited                                           atomic.Int64 // ns
}

// snapshot is the counters as ShadowStats.
func (c *shadowCounts) snapshot() ShadowStats {
	return ShadowStats{Calls: c.shadowCalls.Load(), Waits: c.shadowWaits.Load(), Refusals: c.shadowRefusals.Load(),
		Errors: c.shadowErrors.Load(), Waited: time.Duration(c.shadowWaited.Load())}
}

// shadowSlot is a wait in shadow mode: the call is claimed now or never,
// as AllowN's are, and one refused is written as debt where it goes, now.
// It returns the slot the call goes at (with no member for one written as
// debt), having counted what the wait would have done: with ctx's deadline
// or WithMaxWait, whether it would have failed.
func shadowSlot(t *Throttler, ctx context.Context, n int, prio Priority) reservation {
	res, s := shadowDecide(t, ctx, n, prio)
	if s.Wait > 0 {
		at := time.Now().Add(s.Wait)
		if d, ok := ctx.Deadline(); ok && at.After(d) {
			s.Refused, s.Why = true, RejectedDeadline
		} else if most := t.opt.waits.maxWait; most > 0 && s.Wait > most {
			s.Refused, s.Why = true, RejectedMaxWait
		}
	}
	t.stats.shadowed(ctx, s)
	return res
}

// shadowAllow is AllowN in shadow mode: the call is allowed, and what
// AllowN would have answered is counted.
func shadowAllow(t *Throttler, ctx context.Context, n int, prio Priority) Result {
	res, s := shadowDecide(t, ctx, n, prio)
	s.Allow, s.Refused, s.Wait = true, s.Wait > 0, 0
	t.stats.shadowed(ctx, s)
	t.stats.allowed(n)
	return Result{Allowed: true, Remaining: res.remaining}
}

// shadowDecide claims n units now or never, and writes them as debt at the
// server's now when refused (or when Redis failed): the call goes either
// way. It returns the slot the call goes at, and what enforcement would
// have done as far as the claim tells: how long the call would have
// waited for room (a nanosecond when refused with no time known), or the
// Redis failure that left it undecided.
func shadowDecide(t *Throttler, ctx context.Context, n int, prio Priority) (reservation, ShadowInfo) {
	w := &waiter{n: n, now: true, wake: make(chan struct{}, 1), rank: t.opt.order.rankOf(ctx, prio, false)}
	t.submit(w)
	o, err := w.await(context.WithoutCancel(ctx), t)
	s := ShadowInfo{N: n, Err: err}
	res := w.res // w's caller has gone: the reservation is ours to read
	if err == nil && o != refused {
		return res, s
	}
	now := t.now()
	if err == nil {
		s.Wait = max(res.retry.Sub(now), time.Nanosecond)
	}
	// It goes all the same: counted where it goes, now.
	_ = t.addDebt(context.WithoutCancel(ctx), debtNow(t), n, w.rank.mark)
	return reservation{state: stAdmitted, at: now, immediate: true, remaining: res.remaining}, s
}
