package throttler

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalidArgument is wrapped by every error that reports bad input:
	// to New, to an Option, or to a call such as WaitN with n out of range.
	ErrInvalidArgument = errors.New("throttler: invalid argument")

	// ErrRedis is wrapped by the error a call returns when Redis failed and
	// the failure policy is FailClosed, or when the local fallback cannot
	// serve the call. The Redis error is wrapped too, so errors.Is and
	// errors.As reach it.
	ErrRedis = errors.New("throttler: redis unavailable")
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

func redisError(err error) error {
	return fmt.Errorf("%w: %w", ErrRedis, err)
}

// ctxError wraps the reason ctx ended so that errors.Is(err, ctx.Err())
// holds, and so does errors.Is(err, cause) for a context.Cause that differs.
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("throttler: wait abandoned: %w (%w)", err, cause)
	}
	return fmt.Errorf("throttler: wait abandoned: %w", err)
}

// deadlineError is returned at once, without waiting, when the earliest slot
// a call could get is after its context's deadline.
func deadlineError(slot, deadline time.Time) error {
	return fmt.Errorf("throttler: next slot at %s is after the context deadline %s: %w",
		slot.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano), context.DeadlineExceeded)
}

func isRedis(err error) bool   { return errors.Is(err, ErrRedis) }
func isInvalid(err error) bool { return errors.Is(err, ErrInvalidArgument) }
