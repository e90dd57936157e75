package throttler

import (
	"context"
	"time"
)

// Result is the outcome of Allow and AllowN.
type Result struct {
	// Allowed reports whether the call was admitted and counted.
	Allowed bool
	// Remaining is, when a Redis round trip decided, the least room any
	// limit in force had left right after it, counting every call within
	// one window either side of this call's slot; zero when no round trip
	// decided (a shared pause, the failure policy), or when a shared
	// pause, a lowered limit or a late wake undid what Redis admitted. It
	// counts the whole of each limit: a caller whose priority is held to a
	// share of it (see WithPriorityShare) may have less.
	Remaining int
	// RetryAfter is, when Allowed is false, how long until the requested
	// calls would have fitted had nobody else taken the room; zero when
	// Allowed, when unknown, or when that time had already come as AllowN
	// returned (its caller woken late): try again at once. It is a hint,
	// not a reservation.
	RetryAfter time.Duration
}

// Allow makes one attempt to admit one call now and never waits for quota.
// It is AllowN(ctx, 1).
func (t *Throttler) Allow(ctx context.Context) (Result, error) {
	return t.AllowN(ctx, 1)
}

// AllowN makes one attempt to admit n calls now. n must be at least 1 and
// at most the smallest limit in force (New's and WithLimit's, the first as
// lowered by LowerLimit) times the share of ctx's priority (see
// WithPriorityShare), rounded down, or 1 if that is less; otherwise AllowN
// returns an error wrapping ErrInvalidArgument. When Allowed is true, the
// calls are counted. When it is false, nothing is counted: the attempt's
// members are removed before AllowN returns, or, if Redis fails to remove
// them, by the Throttler's next round trip.
//
// AllowN takes the same path as WaitN, as a claim that may not wait: it
// sees shared pauses, lowered limits and lost windows alike, and its round
// trip carries what this process owes Redis. It does not queue behind
// callers blocked in WaitN on this Throttler: it joins the next round trip,
// ahead of them, and shares it with them. It costs that round trip when
// admitted, and one more when refused (plus up to three samples of the
// server's clock when the Throttler has none); a shared pause or the
// local share after FallbackLocal refuse it without any. On a Redis
// failure it follows the failure policy: FailOpen allows, FallbackLocal
// decides from the local window, FailClosed returns an error wrapping
// ErrRedis. A call of a priority with a share below 1 (see
// WithPriorityShare) is allowed only within its share.
//
// AllowN also returns an error, and counts nothing, when ctx has ended on
// entry or ends before its round trip answers or its slot comes (the error
// wraps ctx.Err(), as WaitN's does), and, under FallbackLocal while Redis
// fails, when n exceeds the local share of a limit (the error wraps
// ErrRedis).
func (t *Throttler) AllowN(ctx context.Context, n int) (Result, error) {
	if err := usable(t, ctx, "AllowN"); err != nil {
		return Result{}, err
	}
	prio := PriorityFromContext(ctx)
	if err := t.checkN("AllowN", n, prio); err != nil {
		return Result{}, err
	}
	if ctx.Err() != nil {
		return Result{}, ctxError(ctx)
	}
	if t.opt.waits.shadow {
		return shadowAllow(t, ctx, n, prio), nil
	}
	w := &waiter{n: n, now: true, wake: make(chan struct{}, 1), rank: rank{prio: prio}}
	t.submit(w)
	o, err := w.await(ctx, t)
	if err != nil {
		if isRedis(err) {
			t.stats.failed.Add(1)
		}
		return Result{}, err
	}
	// w's caller has gone: its reservation is ours to read without the
	// mutex, nothing else writes it now.
	res := w.res
	if o == refused {
		t.stats.refused.Add(1)
		r := Result{Remaining: res.remaining}
		if d := res.retry.Sub(t.now()); d > 0 {
			r.RetryAfter = d
		}
		return r, nil
	}
	t.stats.allowed(n)
	return Result{Allowed: true, Remaining: res.remaining}, nil
}
