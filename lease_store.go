package throttler

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// leaseScript grants places in flight (see WithInFlight) atomically: it
// trims the leases expired by ARGV[1] (the server's now, µs), then adds
// the ids ARGV[5:], in order, scored ARGV[2] (their expiry), while fewer
// than ARGV[3] leases are live, and keeps the key ARGV[4] ms. It returns
// how many it granted and the earliest live lease's expiry (0 = none).
//
// A script rather than add-then-count: a refused id would stay in the set
// until its process took it out, and every other process counting it in
// the meantime would be refused a place that was free, with no release to
// wake it.
var leaseScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
local room = tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[1])
local granted = 0
for i = 5, #ARGV do
  if granted >= room then break end
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i])
  granted = granted + 1
end
if granted > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {granted, first[2] or '0'}
`)

// queueLeases queues the lease script for a's places, when it asks for any.
func (c *attemptCmds) queueLeases(p redis.Pipeliner) {
	a, l := c.a, c.s.lease
	if len(a.leases) == 0 {
		return
	}
	args := make([]any, 0, 4+len(a.leases))
	args = append(args, a.leaseNow, a.leaseExp, l.n, leaseKeyTTL(l.ttl).Milliseconds())
	for _, id := range a.leases {
		args = append(args, id)
	}
	// EVAL, not EVALSHA: a script Redis lost (a restart, a failover)
	// would fail the whole transaction. Redis keeps the compiled script by
	// its body's digest; sending the body costs a few hundred bytes.
	c.leases = leaseScript.Eval(c.ctx, p, []string{l.key}, args...)
}

// leaseReply reads the lease script's answer into r.
func (c *attemptCmds) leaseReply(r *reply) {
	if c.leases == nil {
		return
	}
	v, _ := c.leases.Slice()
	if len(v) < 2 {
		return
	}
	granted, _ := v[0].(int64)
	r.leaseGranted = int(granted)
	if s, ok := v[1].(string); ok {
		f, _ := strconv.ParseFloat(s, 64)
		r.leaseEarliest = int64(f)
	}
}

// leaseKeyTTL is how long the lease key outlives its last write: past
// every lease in it.
func leaseKeyTTL(ttl time.Duration) time.Duration { return 2 * ttl }

func (s *redisStore) releaseLeases(ctx context.Context, ids []string) error {
	l := s.lease
	return s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, l.key, toAny(ids)...)
			p.Publish(ctx, l.key, "released")
			return nil
		})
		return err
	})
}

func (s *redisStore) renewLeases(ctx context.Context, ids []string, expiry int64) error {
	l := s.lease
	zs := make([]redis.Z, len(ids))
	for i, id := range ids {
		zs[i] = redis.Z{Score: float64(expiry), Member: id}
	}
	return s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			// XX: a lease that expired, or was given back, is not brought
			// back; GT: a renewal never shortens one.
			p.ZAddArgs(ctx, l.key, redis.ZAddArgs{XX: true, GT: true, Members: zs})
			p.PExpire(ctx, l.key, leaseKeyTTL(l.ttl))
			return nil
		})
		return err
	})
}

func (s *redisStore) liveLeases(ctx context.Context) (int, error) {
	var n int
	err := s.bounded(ctx, func(ctx context.Context) error {
		now, err := s.rdb.Time(ctx).Result()
		if err != nil {
			return err
		}
		n64, err := s.rdb.ZCount(ctx, s.lease.key, exclusive(now.UnixMicro()), "+inf").Result()
		n = int(n64)
		return err
	})
	return n, err
}

// leaseWatch is a subscription to the releases of places in flight: ready
// is closed once Redis confirmed it (every later release is heard), heard
// receives a value for each release (coalesced while unread), and done is
// closed when the subscription failed or was closed.
type leaseWatch struct {
	ps    *redis.PubSub
	ready chan struct{}
	heard chan struct{}
	done  chan struct{}
}

func (s *redisStore) watchLeases() *leaseWatch {
	w := &leaseWatch{ready: make(chan struct{}), heard: make(chan struct{}, 1), done: make(chan struct{})}
	ctx := context.Background()
	w.ps = s.rdb.Subscribe(ctx, s.lease.key)
	go func() {
		defer close(w.done)
		if _, err := w.ps.Receive(ctx); err != nil {
			return
		}
		close(w.ready)
		for {
			if _, err := w.ps.ReceiveMessage(ctx); err != nil {
				return
			}
			select {
			case w.heard <- struct{}{}:
			default:
			}
		}
	}()
	return w
}

// close ends the subscription and waits for its goroutine.
func (w *leaseWatch) close() {
	w.ps.Close()
	<-w.done
}
