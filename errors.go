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

	// ErrRedis is wrapped by the error a call returns when Redis failed (an
	// error or a timeout): a wait (WaitN or any face that waits) or an
	// AllowN under FailClosed, and, whatever the policy, PauseUntil,
	// LowerLimit, Usage, InFlight, Permit.Settle and Group.Learn. The Redis
	// error is wrapped too, so errors.Is and errors.As reach it. A call
	// FallbackLocal's share cannot take (see FallbackLocal) fails with an
	// error wrapping ErrRedis but no Redis error.
	ErrRedis = errors.New("throttler: redis unavailable")

	// ErrMaxWait is wrapped, with context.DeadlineExceeded, by the error a
	// call returns when its slot lies further away than WithMaxWait allows.
	ErrMaxWait = errors.New("throttler: slot beyond the maximum wait")

	// ErrQueueFull is wrapped by the error a call returns when WithMaxQueue's
	// bound was reached: at once, or when a call of a higher priority shed
	// it from the queue.
	ErrQueueFull = errors.New("throttler: queue full")
)

// usable returns an error wrapping ErrInvalidArgument when t is nil or a
// zero Throttler (one New did not make), or ctx is nil: where names the
// method for the error.
func usable(t *Throttler, ctx context.Context, where string) error {
	if t == nil || t.st == nil {
		return invalidf("%s: the Throttler is nil or was not made by New", where)
	}
	if ctx == nil {
		return invalidf("%s: nil Context", where)
	}
	return nil
}

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

// ended reports whether ctx has ended, or its deadline has passed though
// ctx has not noticed yet (its timer fires a little after the deadline).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// endedError is ctxError for a ctx that ended (see ended), even before
// ctx.Err says so.
func endedError(ctx context.Context) error {
	if ctx.Err() == nil {
		return fmt.Errorf("throttler: wait abandoned: %w", context.DeadlineExceeded)
	}
	return ctxError(ctx)
}

// deadlineError is returned at once, without waiting, when the earliest slot
// a call could get is after its context's deadline, or after its maximum
// wait (cause ErrMaxWait).
func deadlineError(slot, deadline time.Time, cause error) error {
	if cause != nil {
		return rejectf(RejectedMaxWait, cause, "throttler: next slot at %s is after the maximum wait, at %s: %w",
			slot.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano), context.DeadlineExceeded)
	}
	return rejectf(RejectedDeadline, context.DeadlineExceeded, "throttler: next slot at %s is after the context deadline %s",
		slot.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))
}

// rejectedError is the error of a call that failed at once, for reason
// (see Rejection); it wraps sentinel and whatever format wraps.
type rejectedError struct {
	reason Rejection
	err    error
}

func (e *rejectedError) Error() string { return e.err.Error() }
func (e *rejectedError) Unwrap() error { return e.err }

func rejectf(reason Rejection, sentinel error, format string, args ...any) error {
	return &rejectedError{reason: reason, err: fmt.Errorf(format+": %w", append(args, sentinel)...)}
}

// RejectionOf reports why err, an error a wait (see Stats) returned, turned
// the call away without its slot, and ok true when it did: its earliest
// slot lay past its context's deadline (RejectedDeadline) or past its
// maximum wait (RejectedMaxWait, which a call that waited until its
// maximum wait had passed gets too), WithMaxQueue's bound was reached
// (RejectedQueueFull), or a call of a higher priority shed it
// (RejectedShed). It reports ok false for nil and for every other error,
// among them a context that ended while the call waited, a Redis failure
// (ErrRedis) and bad input (ErrInvalidArgument). Waits counted in
// Stats.Rejected are exactly those whose error it reports ok for.
func RejectionOf(err error) (why Rejection, ok bool) {
	var r *rejectedError
	if errors.As(err, &r) {
		return r.reason, true
	}
	if errors.Is(err, ErrMaxWait) {
		return RejectedMaxWait, true
	}
	return 0, false
}

func isRedis(err error) bool   { return errors.Is(err, ErrRedis) }
func isInvalid(err error) bool { return errors.Is(err, ErrInvalidArgument) }
