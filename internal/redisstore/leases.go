package redisstore

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// LeaseScript grants places in flight (see WithInFlight) atomically: it
// trims the leases expired by the server's clock, then adds the ids
// ARGV[6:], in order, to expire ARGV[1] µs from now, while fewer than
// ARGV[2] leases are live, and keeps the keys ARGV[3] ms. When it refuses
// an id, or ARGV[5] is "1" (the process still has waiters), it puts the
// process ARGV[4] in the line for places (KEYS[2], by the time it joined;
// NX keeps its turn). While ARGV[4] is in line, every run marks it as seen
// now (KEYS[3]; see ReleaseScript). It returns how many it granted and the
// earliest live lease's expiry (server µs, 0 = none).
//
// An id already in the set counts as granted (its expiry renewed): the script
// may run twice for one attempt, when the client sends a pipeline again after
// a read that timed out, and the second run must not refuse the place the
// first one granted.
//
// A script rather than add-then-count: a refused id would stay in the set
// until its process took it out, and every other process counting it in
// the meantime would be refused a place that was free. The server's own
// clock, not the caller's estimate of it: a process whose estimate ran
// ahead (a clock step not seen yet) would otherwise trim leases that are
// still live, and grant their places twice.
var LeaseScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- (a number joined to a string keeps 14 digits, rounding now to 100µs)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', now))
local room = tonumber(ARGV[2]) - redis.call('ZCARD', KEYS[1])
local granted = 0
for i = 6, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[i])
  elseif room > 0 then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i])
    room = room - 1
  else
    break
  end
  granted = granted + 1
end
if granted > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if granted < #ARGV - 5 or ARGV[5] == '1' then
  redis.call('ZADD', KEYS[2], 'NX', now, ARGV[4])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
if redis.call('ZSCORE', KEYS[2], ARGV[4]) then
  redis.call('ZADD', KEYS[3], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {granted, first[2] or '0'}
`)

// ReleaseScript takes the places ARGV[3:] back (KEYS[1]) and, for each
// place that was live plus ARGV[1] more, wakes the process first in line
// (KEYS[2]): it leaves the line, and its name is published on the places'
// channel. It returns how many it woke.
//
// One process per place, not every waiting one: a release that woke them
// all would cost a round trip per waiting process, all but one refused.
//
// A process in line not seen for ARGV[2] µs (KEYS[3]: when each last ran the
// lease script) leaves the line without a wake: a process with waiters for a
// place tries again at least every third of the ttl, so one silent for a whole
// ttl was killed or is cut off from Redis, and a wake sent to it would be
// lost, costing each live process in line behind it a third of the ttl.
var ReleaseScript = redis.NewScript(`
local t = redis.call('TIME')
local stale = tonumber(t[1]) * 1000000 + tonumber(t[2]) - tonumber(ARGV[2])
local freed = tonumber(ARGV[1])
if #ARGV > 2 then
  freed = freed + redis.call('ZREM', KEYS[1], unpack(ARGV, 3))
end
local woken = 0
while woken < freed do
  local p = redis.call('ZPOPMIN', KEYS[2])
  if #p == 0 then break end
  local seen = redis.call('ZSCORE', KEYS[3], p[1])
  redis.call('ZREM', KEYS[3], p[1])
  if seen and tonumber(seen) >= stale then
    redis.call('PUBLISH', KEYS[1], p[1])
    woken = woken + 1
  end
end
return woken
`)

// LineKey is the key of the line of processes waiting for a place in
// flight: in key's Redis Cluster slot.
func LineKey(key string) string { return "{" + HashTag(key) + "}:line:" + key }

// SeenKey is the key of when each process in line for key's places last
// asked for one (server µs), in key's Redis Cluster slot. A release takes a
// process's entry out as it takes the process out of the line.
func SeenKey(key string) string { return "{" + HashTag(key) + "}:seen:" + key }

// queueLeases queues the lease script for a's places, when it asks for any.
func (c *attemptCmds) queueLeases(p redis.Pipeliner) {
	a, l := c.a, c.s.lease
	if len(a.Places.IDs) == 0 {
		return
	}
	stay := "0"
	if a.Places.Stay {
		stay = "1"
	}
	args := make([]any, 0, 5+len(a.Places.IDs))
	args = append(args, l.TTL.Microseconds(), l.N, leaseKeyTTL(l.TTL).Milliseconds(), c.s.self, stay)
	for _, id := range a.Places.IDs {
		args = append(args, id)
	}
	// EVAL, not EVALSHA: a script Redis lost (a restart, a failover)
	// would fail the whole transaction. Redis keeps the compiled script by
	// its body's digest; sending the body costs a few hundred bytes.
	c.leases = LeaseScript.Eval(c.ctx, p, []string{l.Key, LineKey(l.Key), SeenKey(l.Key)}, args...)
}

// leaseReply reads the lease script's answer into r.
func (c *attemptCmds) leaseReply(r *core.Reply) {
	if c.leases == nil {
		return
	}
	v, _ := c.leases.Slice()
	if len(v) < 2 {
		return
	}
	granted, _ := v[0].(int64)
	r.LeaseGranted = int(granted)
	if s, ok := v[1].(string); ok {
		f, _ := strconv.ParseFloat(s, 64)
		r.LeaseEarliest = int64(f)
	}
}

// leaseKeyTTL is how long the lease key outlives its last write: past
// every lease in it.
func leaseKeyTTL(ttl time.Duration) time.Duration { return 2 * ttl }

// ReleaseLeases takes the places ids back and wakes, for each one it took
// back and pass more, the next process in the line for a place (see
// ReleaseScript), in one script.
func (s *Store) ReleaseLeases(ctx context.Context, ids []string, pass int) error {
	l := s.lease
	args := make([]any, 0, 2+len(ids))
	args = append(args, pass, l.TTL.Microseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	return s.bounded(ctx, func(ctx context.Context) error {
		return ReleaseScript.Eval(ctx, s.rdb, []string{l.Key, LineKey(l.Key), SeenKey(l.Key)}, args...).Err()
	})
}

// RenewScript renews the places ARGV[3:] (KEYS[1]) to expire ARGV[1] µs
// from now, by the server's clock, and returns those it no longer holds:
// a lease that expired (whether trimmed yet or not), or was given back, is
// not brought back. A renewal never moves an expiry earlier; the key is
// kept ARGV[2] ms, past every lease.
//
// The server's own clock, not the caller's estimate of it, as in
// LeaseScript: a process whose local clock stepped back, before a round trip
// showed the step, would renew to an expiry short by the step, which it
// ignores, and lose a place it still believes it holds (simulation seed
// 50717); one whose clock stepped ahead would keep its places past ttl.
var RenewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local expiry = now + tonumber(ARGV[1])
local lost = {}
for i = 3, #ARGV do
  local s = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if s and tonumber(s) > now then
    redis.call('ZADD', KEYS[1], 'XX', 'GT', expiry, ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return lost
`)

// RenewLeases moves the expiry of the places ids to the ttl from now, by
// the server's clock, and returns those of ids Redis no longer holds (see
// RenewScript).
func (s *Store) RenewLeases(ctx context.Context, ids []string) (lost []string, err error) {
	l := s.lease
	args := make([]any, 0, 2+len(ids))
	args = append(args, l.TTL.Microseconds(), leaseKeyTTL(l.TTL).Milliseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	var mu sync.Mutex // bounded may return before the call does
	err = s.bounded(ctx, func(ctx context.Context) error {
		got, err := RenewScript.Eval(ctx, s.rdb, []string{l.Key}, args...).StringSlice()
		mu.Lock()
		lost = got
		mu.Unlock()
		return err
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		return nil, err
	}
	return lost, nil
}

// LiveLeases counts the places in flight taken now, by the server's
// clock: TIME, then ZCOUNT of the leases expiring after it.
func (s *Store) LiveLeases(ctx context.Context) (int, error) {
	var n int
	err := s.bounded(ctx, func(ctx context.Context) error {
		now, err := s.rdb.Time(ctx).Result()
		if err != nil {
			return err
		}
		n64, err := s.rdb.ZCount(ctx, s.lease.Key, exclusive(now.UnixMicro()), "+inf").Result()
		n = int(n64)
		return err
	})
	return n, err
}

// WatchLeases subscribes to the wakes of processes waiting for a place in
// flight, keeping those for this process.
func (s *Store) WatchLeases() *Subscription {
	return s.subscribe(s.lease.Key, func(payload string) bool { return payload == s.self })
}
