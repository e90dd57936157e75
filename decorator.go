package throttler

import "context"

// Do waits for one call's worth of quota (as Wait does) and then calls fn.
// With WithInFlight it also takes a place in flight, given back when fn
// returns. Right before it calls fn, Do checks that the call's slot has
// not passed by more than its allowance (half the buffer, less the clock
// estimate's error, plus any margin: see WithBuffer): a goroutine that ran
// late after its admission gives the slot back and waits again rather
// than call late. If the wait fails, fn is not called and Do returns the
// wait's error; otherwise it returns what fn returns.
//
// fn gets ctx with an httptrace.ClientTrace added: the first HTTP request
// fn sends with it through net/http is held at its connection, as a
// Transport holds its requests (see Transport): when the connection came
// later than the slot allows, the call takes a new slot, holding the
// connection, and the request goes on that. fn must send that request
// before it returns, from its own goroutine or one it waits for; its
// later requests with ctx are not held. A call fn makes any other way (a
// gRPC call, a client that does not use net/http) goes when fn makes it:
// make it at once, on a connection already open, or give the buffer the
// time it takes (see WaitN).
func (t *Throttler) Do(ctx context.Context, fn func(context.Context) error) error {
	p, err := t.reserveToSend(ctx, "Do", 1, 0)
	if err != nil {
		return err
	}
	defer p.Done()
	return fn(gateSend(ctx, t, p))
}

// Wrap returns a function with fn's signature that waits for one call's worth
// of quota on t before each call to fn, as Do does (a place in flight
// included, with WithInFlight, and fn's first HTTP request through
// net/http held at its connection). If the wait fails, fn is
// not called and the wrapper returns the zero Out and the wait's error.
func Wrap[In, Out any](t *Throttler, fn func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (out Out, err error) {
		err = t.Do(ctx, func(ctx context.Context) error {
			out, err = fn(ctx, in)
			return err
		})
		return out, err
	}
}

// DoCost reserves estimate units of quota (as Acquire does), calls fn as
// Do does (with ctx holding fn's first HTTP request at its connection),
// and settles the reservation with the cost fn reports (see
// Permit.Settle): a surplus goes back to every replica at once, an excess
// counts as debt. With WithInFlight, the call holds a place in flight
// until fn returns. If the reservation fails, fn is not called and DoCost
// returns its error. fn reports the cost even when it fails: 0 for a call
// that never reached the API, the estimate to keep it, or a negative cost
// to keep it too. A call whose request fn wrote off its slot (its
// connection came too late and it could not wait for a new one, as
// Transport describes) keeps its estimate, counted as debt where it went,
// whatever fn reports. DoCost returns fn's error, or else the settle's.
func (t *Throttler) DoCost(ctx context.Context, estimate int, fn func(context.Context) (cost int, err error)) error {
	p, err := t.reserveToSend(ctx, "DoCost", estimate, 0)
	if err != nil {
		return err
	}
	defer p.Done() // when fn panics; Settle ends the call otherwise
	cost, err := fn(gateSend(ctx, t, p))
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

// WrapCost returns a function with fn's signature that prices each call as
// DoCost does: it reserves estimate(in) units, calls fn, and settles with
// actual(out, err), the cost the call reports (negative: keep the
// estimate). A wrapper whose reservation fails does not call fn and
// returns the zero Out and the reservation's error; otherwise it returns
// what fn returned, or the settle's error when fn's is nil.
func WrapCost[In, Out any](t *Throttler, estimate func(In) int, fn func(context.Context, In) (Out, error), actual func(Out, error) int) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (out Out, err error) {
		err = t.DoCost(ctx, estimate(in), func(ctx context.Context) (int, error) {
			out, err = fn(ctx, in)
			return actual(out, err), err
		})
		return out, err
	}
}
