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
