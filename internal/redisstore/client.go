package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// errTimeout reports a Redis call that did not answer in time.
var errTimeout = errors.New("no answer within the Redis timeout")

// bounded runs a Redis call and returns by ctx's deadline even when the
// client would not (see store). When the client itself ends the call in
// time (see inline), the call runs in the caller's goroutine. Otherwise it
// runs in a helper goroutine and bounded returns at the deadline exactly: a
// call that overruns is left to finish in the background (the client's own
// timeouts end it), its results never read.
func (s *Store) bounded(ctx context.Context, call func(context.Context) error) error {
	if s.inline(ctx) {
		return call(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errTimeout, context.Cause(ctx))
	}
}

// inlineSlack is how much later than ctx's deadline a client's socket
// timeouts may end a call that inline still lets run in the caller's
// goroutine: the time between the caller setting its deadline and the call
// starting, which is microseconds unless the process stalls.
const inlineSlack = 2 * time.Millisecond

// inline reports whether the client ends a call made with ctx by ctx's
// deadline by itself, within the slack below, so that the call may run in
// the caller's goroutine.
//
// A client that honours context deadlines applies ctx's to every socket
// read and write, and to waiting for a connection and dialing. A
// *redis.Client without ContextTimeoutEnabled ends those waits, and the
// backoff before a retry, at ctx's deadline too, but each socket write and
// read at its own WriteTimeout and ReadTimeout instead: inline takes it when
// both are set and no longer than the time ctx has left, give or take
// inlineSlack. The call then ends by the later of its deadline and Redis's
// last answer to it, plus at most one socket write and one socket read,
// each within those timeouts: after that time go-redis starts no new wait,
// dial or retry, and only a write and then a read can still be under way on
// a connection it holds. A Redis that hung before the call began fails it
// about one read timeout after the call began (at its deadline when that timeout
// is the time it had), or, where go-redis retried a timed-out read, up to
// one read timeout past the deadline.
func (s *Store) inline(ctx context.Context) bool {
	if s.ctxTimeouts {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && s.ioTimeout > 0 && s.ioTimeout <= time.Until(deadline)+inlineSlack
}

// HonoursContext reports whether the client ends a call at its context's
// deadline by itself.
func HonoursContext(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// SocketTimeout returns the longer of c's socket read and write timeouts
// when c is a *redis.Client that sets both, and 0 otherwise. Only a
// *redis.Client (a failover client is one), the client whose way to a
// socket inline describes: a cluster client follows redirects and reloads
// its slot map, and a ring spreads a pipeline over its shards, with calls
// of their own; without ContextTimeoutEnabled, they keep the helper
// goroutine.
func SocketTimeout(c redis.UniversalClient) time.Duration {
	rc, ok := c.(*redis.Client)
	if !ok {
		return 0
	}
	// Options holds the values in force: 0 means no deadline, and -1 that
	// go-redis sets none.
	o := rc.Options()
	if o.ReadTimeout <= 0 || o.WriteTimeout <= 0 {
		return 0
	}
	return max(o.ReadTimeout, o.WriteTimeout)
}

// pipelined returns the client's TxPipelined when once is set, else its
// Pipelined. go-redis sends a plain pipeline again when its reply is lost
// after it was written, and a transaction only when it could not be
// written: a pipeline that gives back calls written for sure is sent as a
// transaction (once), for GiveBackScript must not run twice (a call's
// count would leave its bucket twice). A caller that sends it again after
// an error gives those calls back plainly (see core.Attempt.Resent).
func (s *Store) pipelined(once bool) func(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	if once {
		return s.rdb.TxPipelined
	}
	return s.rdb.Pipelined
}

// Closed reports whether err says the client was closed: it will never
// answer again.
func Closed(err error) bool { return errors.Is(err, redis.ErrClosed) }
