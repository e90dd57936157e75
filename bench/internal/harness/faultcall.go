package harness

import (
	"context"
	"errors"
	"net"
	"net/http"
	"regexp"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/bench/internal/impls"
	"github.com/redis/go-redis/v9"
)

// This file is a KindRedisFault replica's side: its loop, and how it
// sorts the errors of its Waits.

// loopFault is one goroutine of a KindRedisFault replica: as loop, with
// each Wait bound by cfg.WaitTimeout when set, and each failed Wait's
// error sorted and counted by message.
func loopFault(ctx context.Context, cfg ReplicaConfig, w impls.Waiter, client *http.Client, warmEnd time.Time, l *goroutineLog) {
	for ctx.Err() == nil {
		w0 := time.Now()
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if cfg.WaitTimeout > 0 {
			wctx, cancel = context.WithTimeout(ctx, cfg.WaitTimeout)
		}
		score, err := impls.WaitAt(wctx, w)
		cancel()
		done := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				l.sortError(err)
			}
			if l.waitFailed(ctx, err) {
				return
			}
			continue
		}
		l.admit(w0, done, warmEnd)
		l.called(call(client, cfg, score, w0, done))
	}
}

// The kinds of a failed Wait's error (see FaultRow).
const (
	errDeadline     = "deadline"
	errRedisTimeout = "redis timeout"
	errOther        = "other"
)

// errorKind sorts a failed Wait's error: the call's own deadline, a Redis
// client's timeout, or anything else. An error wrapping
// throttler.ErrRedis is Redis's, whatever else it wraps: the library's
// own timeout on a round trip wraps context.DeadlineExceeded too.
func errorKind(err error) string {
	var ne net.Error
	timeout := errors.Is(err, redis.ErrPoolTimeout) || errors.As(err, &ne) && ne.Timeout()
	switch {
	case errors.Is(err, throttler.ErrRedis) && timeout:
		return errRedisTimeout
	case errors.Is(err, throttler.ErrRedis):
		return errOther
	case errors.Is(err, context.DeadlineExceeded):
		return errDeadline
	case timeout:
		return errRedisTimeout
	}
	return errOther
}

// addrPattern matches an IPv4 address and port, as errors of a
// connection quote them, and timePattern a time as the library's errors
// quote it (RFC 3339).
var (
	addrPattern = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`)
	timePattern = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
)

// sortError counts err by its kind and its message, with the addresses
// and times it quotes left out (each connection has its own port, each
// wait its own deadline).
func (l *goroutineLog) sortError(err error) {
	kind := errorKind(err)
	if l.errMsgs == nil {
		l.errMsgs = map[[2]string]int64{}
	}
	msg := timePattern.ReplaceAllString(addrPattern.ReplaceAllString(err.Error(), "ADDR"), "TIME")
	l.errMsgs[[2]string{msg, kind}]++
}
