package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Transient reports whether err is a failure that a call sent again, on
// another connection, may well not meet: the connection broke (reset,
// closed, refused, a write or read that found it gone), a socket timeout
// of the client's own ended the wait for an answer, the pool had no
// connection free in time, or the server said it is busy in a way that
// passes (LOADING, READONLY after a failover, MASTERDOWN, TRYAGAIN,
// CLUSTERDOWN, max clients). A call that failed so may or may not have
// been applied. Not transient: the caller's context ending (the time to
// try again is spent), the client closed, a bound of the Store's own
// (errTimeout), a round trip that must not be sent again
// (errPlacedNotResent), or any other reply of the server, such as a
// script error.
func Transient(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, errTimeout), errors.Is(err, errPlacedNotResent), Closed(err):
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, redis.ErrPoolTimeout):
		return true
	case redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsMasterDownError(err),
		redis.IsTryAgainError(err), redis.IsClusterDownError(err), redis.IsMaxClientsError(err):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true // a dial, a read or a write that failed, or a socket timeout
	}
	return false
}
