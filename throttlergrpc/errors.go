package throttlergrpc

import (
	"context"
	"errors"

	"github.com/go-throttler/throttler"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// localError is the error of a call the interceptor did not send: its
// wait failed, its Route failed, or the interceptor was given bad
// arguments. It is a gRPC status error (status.Code and status.FromError
// read its code) that wraps the cause, so that errors.Is(err,
// context.DeadlineExceeded), errors.Is(err, throttler.ErrRedis),
// throttler.RejectionOf(err) and the like hold. An interceptor reading
// another's localError (chained interceptors) does not take its
// RESOURCE_EXHAUSTED for the API's refusal.
type localError struct {
	code codes.Code
	err  error
}

func (e *localError) Error() string { return "throttlergrpc: " + e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// GRPCStatus makes the error a gRPC status error, for status.FromError,
// status.Code and grpc-go's own handling.
func (e *localError) GRPCStatus() *status.Status { return status.New(e.code, e.Error()) }

// isLocal reports whether err is (or wraps) a localError.
func isLocal(err error) bool {
	var l *localError
	return errors.As(err, &l)
}

// waitError is the error of a call whose wait on th failed: its code says
// why (see UnaryClientInterceptor).
func waitError(err error) error {
	return &localError{code: codeOf(err), err: err}
}

// codeOf is the gRPC code for an error of the throttler package.
func codeOf(err error) codes.Code {
	if _, ok := throttler.RejectionOf(err); ok {
		// No slot before the deadline or the maximum wait, a full queue:
		// the quota has no room for the call, as the API's own refusal
		// would say.
		return codes.ResourceExhausted
	}
	switch {
	case errors.Is(err, throttler.ErrInvalidArgument):
		return codes.InvalidArgument
	case errors.Is(err, throttler.ErrRedis):
		return codes.Unavailable
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Unknown
}

// routeError is the error of a call whose Route failed.
func routeError(err error) error {
	code := codes.Unavailable // a limits function that failed, say: may pass
	if errors.Is(err, throttler.ErrInvalidArgument) {
		code = codes.InvalidArgument
	}
	return &localError{code: code, err: err}
}
