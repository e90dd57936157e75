package throttler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// roundTrips counts the commands and pipelines (one round trip each) that
// c runs from now on, but for the handshake of each new connection
// (HELLO, CLIENT SETINFO): its result reads the count.
func roundTrips(c *redis.Client) func() int {
	h := &roundTripHook{}
	c.AddHook(h)
	return func() int { return int(h.n.Load()) }
}

type roundTripHook struct{ n atomic.Int64 }

// handshake reports whether cmds are a new connection's handshake.
func handshake(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		if n := c.Name(); n != "hello" && n != "client" {
			return false
		}
	}
	return true
}

func (h *roundTripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *roundTripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !handshake(cmds...) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// Usage reads every limit's window in two round trips, as its doc says,
// whatever the limits and however they are kept: a compacted window's
// count (CountScript, sent as its text) rides in the second.
func TestUsageTwoRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opts      []Option
		compacted bool
	}{
		{"one limit", nil, false},
		{"two limits, compacted", []Option{WithLimit("{u}:day", 1000, 24*time.Hour), WithCompactFrom(10)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := miniClient(t)
			count := roundTrips(c)
			th := mustNew(t, c, "{u}:minute", 100, time.Minute, append([]Option{WithLogger(quiet)}, tc.opts...)...)
			ctx := context.Background()
			if err := th.Wait(ctx); err != nil { // the clock's samples, and a call to count
				t.Fatal(err)
			}
			waitIdle(t, th)
			before := count()
			u, err := th.Usage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n := count() - before; n != 2 {
				t.Errorf("Usage took %d round trips, want 2", n)
			}
			if len(u) != len(th.rules.Wins) || u[0].Used+u[0].Reserved != 1 || (u[0].Bucket > 0) != tc.compacted {
				t.Errorf("Usage = %+v, want every limit, the first holding the call (compacted: %t)", u, tc.compacted)
			}
		})
	}
}
