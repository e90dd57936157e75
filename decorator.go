package throttler

import "context"

// Do waits for one call's worth of quota (as Wait does) and then calls fn
// with ctx. If the wait fails, fn is not called and Do returns the wait's
// error; otherwise it returns what fn returns.
func (t *Throttler) Do(ctx context.Context, fn func(context.Context) error) error {
	if err := t.Wait(ctx); err != nil {
		return err
	}
	return fn(ctx)
}

// Wrap returns a function with fn's signature that waits for one call's worth
// of quota on t before each call to fn, passing ctx through. If the wait
// fails, fn is not called and the wrapper returns the zero Out and the wait's
// error.
func Wrap[In, Out any](t *Throttler, fn func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		if err := t.Wait(ctx); err != nil {
			var zero Out
			return zero, err
		}
		return fn(ctx, in)
	}
}

// DoCost reserves estimate units of quota (as Reserve does), calls fn with
// ctx, and settles the reservation with the cost fn reports (see
// Permit.Settle): a surplus goes back to every replica at once, an excess
// counts as debt. If the reservation fails, fn is not called and DoCost
// returns its error. fn reports the cost even when it fails: 0 for a call
// that never reached the API, the estimate to keep it, or a negative cost
// to keep it too. DoCost returns fn's error, or else the settle's.
func (t *Throttler) DoCost(ctx context.Context, estimate int, fn func(context.Context) (cost int, err error)) error {
	p, err := t.Reserve(ctx, estimate)
	if err != nil {
		return err
	}
	cost, err := fn(ctx)
	if cost < 0 {
		cost = estimate
	}
	// The caller's context may end with fn: the cost is for every replica.
	serr := p.Settle(context.WithoutCancel(ctx), cost)
	if err != nil {
		return err
	}
	return serr
}
