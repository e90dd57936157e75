package throttlergrpc

import (
	"cmp"
	"context"

	"github.com/go-throttler/throttler"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// interceptor is what the unary and the stream interceptor share: the
// Route, the Options, and the steps of a call (pick, admit, learn, end).
type interceptor struct {
	route  Route
	cfg    config
	err    error // set when built with bad arguments: every call fails with it
	limits limits
}

func newInterceptor(where string, route Route, opts []Option) *interceptor {
	cfg, err := newConfig(opts)
	if err == nil && route == nil {
		err = invalidf("%s: nil Route (use Throttler(t) for one Throttler)", where)
	}
	ic := &interceptor{route: route, cfg: cfg}
	if err != nil {
		ic.err = &localError{code: codes.InvalidArgument, err: err}
	}
	return ic
}

// pick returns the Throttler the call waits on; nil for a call that goes
// unthrottled.
func (ic *interceptor) pick(ctx context.Context, method string) (*throttler.Throttler, error) {
	if ic.err != nil {
		return nil, ic.err
	}
	th, err := ic.route(ctx, method)
	if err != nil {
		return nil, routeError(err)
	}
	return th, nil
}

// tries admits a call on th and makes it with call, which ends the permit
// (or hands it on) and reports whether the API refused it; a refused call
// is admitted and made again, up to WithRetries times, while ctx lasts. It
// returns the last call's error, or, when a wait fails, that wait's error
// (the refusal before it, if any: a retry that cannot wait).
func (ic *interceptor) tries(ctx context.Context, th *throttler.Throttler, call func(p *throttler.Permit, priced bool) (refused bool, err error)) error {
	var refusal error
	for try := 0; ; try++ {
		p, priced, err := ic.admit(ctx, th)
		if err != nil {
			return cmp.Or(refusal, err)
		}
		refused, err := call(p, priced)
		if !refused || try >= ic.cfg.retries || ctx.Err() != nil {
			return err
		}
		refusal = err
	}
}

// admit waits on th for the call's units (the cost its context carries,
// else 1; and with throttler.WithInFlight a place in flight), and returns
// the permit that ends the call, and whether the call is priced (see
// end).
func (ic *interceptor) admit(ctx context.Context, th *throttler.Throttler) (*throttler.Permit, bool, error) {
	n, costed := throttler.CostFromContext(ctx)
	if !costed {
		n = 1
	}
	p, err := th.Acquire(ctx, n)
	if err != nil {
		return nil, false, waitError(err)
	}
	return p, costed || ic.cfg.actual != nil, nil
}

// learn reads what a call's outcome says of the API's quota (its error,
// and the metadata it came with) and shares it with every replica of th:
// a refusal pauses them (see config.pause), a stated limit lowers theirs
// (see limits.follow). It returns the verdict. The writes use ctx without
// its cancellation: the news is for everyone.
func (ic *interceptor) learn(ctx context.Context, th *throttler.Throttler, err error, mds ...metadata.MD) verdict {
	v, st := readStatus(err, mds...)
	if !v.refused && ic.cfg.limitKey == "" {
		return v
	}
	ctx = context.WithoutCancel(ctx)
	if v.refused {
		ic.cfg.pause(ctx, th, v)
	}
	if n := ic.cfg.limitOf(st, mds...); n > 0 {
		ic.limits.follow(ctx, th, n, ic.cfg.limitFor)
	}
	return v
}

// end ends the call p admitted: a priced call (its context carries a
// cost, or WithActualCost is set) that the API refused is settled at 0,
// for the API did none of its work; a successful one, with
// WithActualCost, at what actual says it cost; every other call keeps
// its units. Its place in flight, if any, goes back.
func (ic *interceptor) end(ctx context.Context, p *throttler.Permit, priced bool, v verdict, actual func() (int, bool)) {
	ctx = context.WithoutCancel(ctx) // the cost is for every replica
	switch {
	case priced && v.refused:
		_ = p.Settle(ctx, 0)
	case actual != nil:
		if n, ok := actual(); ok && n >= 0 {
			_ = p.Settle(ctx, n) // a failed write is written by th's next round trip
			return
		}
		p.Done()
	default:
		p.Done()
	}
}
