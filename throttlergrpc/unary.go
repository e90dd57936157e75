package throttlergrpc

import (
	"context"

	"github.com/go-throttler/throttler"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// UnaryClientInterceptor returns a grpc.UnaryClientInterceptor that waits
// on the Throttler route picks for each call before making it, and shares
// the API's refusals with every replica through Redis. Install it with
// grpc.WithChainUnaryInterceptor (or grpc.WithUnaryInterceptor).
//
// A call waits with its own context, as Throttler.Acquire does, for the
// cost the context carries (throttler.ContextWithCost), or 1: its
// tenant (throttler.ContextWithTenant) and priority
// (throttler.ContextWithPriority) count as they do for any wait. It is
// made once the wait returns, at its slot, and ends when the call
// returns: with throttler.WithInFlight it holds a place in flight
// meanwhile. A call whose wait fails is not made; it fails with an error
// that wraps the wait's (errors.Is and throttler.RejectionOf see it) and
// whose gRPC code says why:
//
//   - RESOURCE_EXHAUSTED: the quota has no room for the call in time: its
//     earliest slot lies past its deadline (it fails at once, without
//     sleeping; errors.Is(err, context.DeadlineExceeded) holds), past
//     throttler.WithMaxWait, or throttler.WithMaxQueue turned it away;
//   - CANCELED, DEADLINE_EXCEEDED: its context ended while it waited;
//     whatever was reserved for it goes back;
//   - UNAVAILABLE: Redis failed under throttler.FailClosed;
//   - INVALID_ARGUMENT: a cost out of range, a bad Route or Option (no
//     call is ever made then).
//
// The API's answer is read as the Transport reads an HTTP response:
//
//   - RESOURCE_EXHAUSTED with a google.rpc.RetryInfo detail pauses every
//     replica until its retry_delay is over (throttler.Throttler.PauseUntil,
//     at most WithMaxPause), or without one, for the delay a
//     grpc-retry-pushback-ms trailer asks for (gRFC A6's server pushback,
//     in milliseconds; a negative or malformed one says not to retry, and
//     the call is not made again); without either, it backs every replica off
//     (throttler.Throttler.BackOff: WithBackoff, doubling while the API
//     keeps refusing). grpc-go's own RESOURCE_EXHAUSTED for a message over
//     the size limits, or an HTTP/2 flow-control reset, is not a refusal
//     for quota, and pauses no one;
//   - UNAVAILABLE with RetryInfo, or a positive pushback, pauses every
//     replica the same way; UNAVAILABLE without either (a connection lost,
//     a server restarting) is
//     the call's own, and pauses no one;
//   - with WithLimitMetadata or WithQuotaFailureLimit, a stated limit
//     below the Throttler's lowers it for every replica.
//
// With WithRetries, a refused call waits again (the pause holds its wait)
// and is made again, up to n times; the caller sees the last answer. A
// call that carries a cost, or any call with WithActualCost, is settled at
// 0 units when refused (the API did none of its work; a retry reserves
// anew); a refused call that carries none keeps its one call, as the API
// may count refusals. The interceptor returns the invoker's error as it
// came, and its reply.
//
// Where the slot is counted: the promise that no window of the API holds
// more than the limit assumes each call reaches the API within half the
// buffer (throttler.WithBuffer, 50ms by default) after its slot. The call
// goes the moment the wait returns, on the ClientConn's connection: on an
// established HTTP/2 connection that is a frame written at once, but a
// connection that must first be made (grpc.NewClient connects lazily, at
// the first call; a reconnection after the server went away) delays the
// call by its dial, TCP and TLS, past its slot. Unlike the Transport,
// which holds an HTTP request at its connection until its slot holds,
// this interceptor cannot see the connection: warm it before the calls
// that count (conn.Connect(), then wait for connectivity.Ready), keep it
// warm (grpc.WithKeepaliveParams), or give the buffer the time a dial
// takes. grpc-go's own retries (a service config's retryPolicy or
// hedgingPolicy) happen inside the invoker, below the interceptor: those
// attempts are not throttled, each may count at the API, and a retried
// refusal is not read; turn them off (grpc.WithDisableRetry) and use
// WithRetries, or count them in the limit.
//
// route nil, or a bad Option, fails every call, unsent, with an error
// wrapping throttler.ErrInvalidArgument (code INVALID_ARGUMENT). The
// interceptor is safe for concurrent use.
func UnaryClientInterceptor(route Route, opts ...Option) grpc.UnaryClientInterceptor {
	ic := newInterceptor("UnaryClientInterceptor", route, opts)
	return ic.unary
}

func (ic *interceptor) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	th, err := ic.pick(ctx, method)
	if err != nil {
		return err
	}
	if th == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	return ic.tries(ctx, th, func(p *throttler.Permit, priced bool) (bool, error) {
		// The trailer may carry a pushback (see readStatus), the header
		// and the trailer a stated limit (WithLimitMetadata).
		var header, trailer metadata.MD
		callOpts := append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))
		if ic.cfg.limitKey != "" {
			callOpts = append(callOpts, grpc.Header(&header))
		}
		err := invoker(ctx, method, req, reply, cc, callOpts...)
		v := ic.learn(ctx, th, err, header, trailer)
		var actual func() (int, bool)
		if err == nil && ic.cfg.actual != nil {
			actual = func() (int, bool) { return ic.cfg.actual(ctx, method, reply) }
		}
		ic.end(ctx, p, priced, v, actual)
		return v.refused && !v.final, err
	})
}
