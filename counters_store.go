package throttler

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// countersRead is what a Transport reads of the shared window before it
// follows an API's counter or backs off, in one round trip.
type countersRead struct {
	used                int   // units scored within the range asked for, in the first key
	limit, limitEnd     int64 // the lowered first limit and its end (server µs); 0 = none
	backoff, backoffEnd int64 // the last back-off's length and end (server µs); 0 = none
}

// countersReader is the part of a store that reads and writes for
// Counters; the Redis store has it. A store without it (a test's wrapper)
// follows no counter but still pauses.
type countersReader interface {
	readCounters(ctx context.Context, from, to int64) (countersRead, error)
	applyCounters(ctx context.Context, a countersApply) (countersApplied, error)
}

// countersApply is a batch of readings of an API's counter to apply to the
// shared limit in one step (see counterScript), with what the step needs.
type countersApply struct {
	limit    int   // New's first limit
	gradual  bool  // the counter frees calls as they age
	interval int64 // the first limit's interval (µs)
	tol      int64 // readings whose resets lie this close (µs) are of one reset
	maxFor   int64 // the longest a lowering lasts from now (µs)
	ttl      int64 // the key's TTL at least, when a lowering is written (ms)
	channel  string
	readings []countersReading
}

// countersReading is one response's counter, in server µs: the calls of
// ours scored in (from, to] are those the API had counted, and it had
// remaining more before reset; windows > 1 spreads remaining over that
// many windows of ours instead (a reset further than one).
type countersReading struct {
	from, to, reset int64
	remaining       int
	windows         int64
}

// countersApplied is the limit in force once a batch was applied (0 =
// none) and its end, and the latest reset before which a reading left
// nothing at all (0 = none): the caller pauses until then.
type countersApplied struct {
	limit          int
	end, zeroUntil int64
}

// counterScript applies readings of an API's own counter to the shared
// limit at KEYS[1], atomically: a reading implies the limit n = the calls
// of ours scored in (from, to] + remaining (or remaining / windows). A
// fixed window's readings of one reset only lower the limit, one of a
// later reset replaces it, one of an earlier reset is stale; a gradual
// counter's limit is the least that the readings of the last interval
// imply, kept per eighth of the interval in members of the key (its
// largest count of another consumer's calls over the last interval is
// the one to hold to: what aged out a moment ago comes back). A change is
// written and published as news. One script, so that replicas applying
// readings at once cannot write over a lower limit with a higher one of
// the same reset.
var counterScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local L, gradual, interval, tol = tonumber(ARGV[1]), ARGV[2] == '1', tonumber(ARGV[3]), tonumber(ARGV[4])
local maxEnd, ttl, channel = now + tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local mLim, mEnd, mB, mN = ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local cur = redis.call('ZMSCORE', key, mLim, mEnd)
local lim, lend = 0, 0
if cur[1] and cur[2] then lim, lend = -tonumber(cur[1]), -tonumber(cur[2]) end
if not (lim > 0 and lend > now and lim < L) then lim, lend = 0, 0 end
local lim0, lend0, zero = lim, lend, 0
local nb = 9
local blen = math.max(1, math.floor(interval / (nb - 1)))
for i = 12, #ARGV, 5 do
  local to, rem, reset, windows = tonumber(ARGV[i+1]), tonumber(ARGV[i+2]), tonumber(ARGV[i+3]), tonumber(ARGV[i+4])
  local n
  if windows > 1 then
    n = math.floor(rem / windows)
  else
    n = rem + redis.call('ZCOUNT', key, '(' .. ARGV[i], ARGV[i+1])
  end
  local e, apply = reset, true
  if gradual then
    local b = math.floor(to / blen)
    local slot, keep, own = b % nb, true, n
    for k = 0, nb - 1 do
      local s = redis.call('ZMSCORE', key, mB .. k, mN .. k)
      if s[1] and s[2] then
        local bi, bn = -tonumber(s[1]), -tonumber(s[2])
        if bi > b - nb then
          n = math.min(n, bn)
          if k == slot then
            if bi == b then own = math.min(own, bn) elseif bi > b then keep = false end
          end
        end
      end
    end
    if keep then
      redis.call('ZADD', key, string.format('%.0f', -b), mB .. slot, -own, mN .. slot)
    end
    e = to + interval
  elseif lim > 0 then
    if math.abs(lend - reset) <= tol then
      apply = n < lim
    elseif lend > reset then
      apply = false
    end
  end
  e = math.min(e, maxEnd)
  if apply and e > now then
    if n <= 0 then
      zero = math.max(zero, reset)
    elseif n >= L then
      lim, lend = 0, 0
    else
      lim, lend = n, e
    end
  end
end
if lim ~= lim0 or lend ~= lend0 then
  if lim == 0 then
    redis.call('ZREM', key, mLim, mEnd)
  else
    redis.call('ZADD', key, -lim, mLim, string.format('%.0f', -lend), mEnd)
    if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
  end
  if lim ~= lim0 then
    redis.call('PUBLISH', channel, 'l ' .. lim .. ' ' .. string.format('%.0f', lend))
  end
end
return {lim, string.format('%.0f', lend), string.format('%.0f', zero)}
`)

// applyCounters applies a batch of readings (see counterScript).
func (s *redisStore) applyCounters(ctx context.Context, a countersApply) (countersApplied, error) {
	gradual := "0"
	if a.gradual {
		gradual = "1"
	}
	args := make([]any, 0, 11+5*len(a.readings))
	args = append(args, a.limit, gradual, a.interval, a.tol, a.maxFor, a.ttl, a.channel,
		limitMember, limitEndMember, gradualBucketMember, gradualLimitMember)
	for _, r := range a.readings {
		args = append(args, r.from, r.to, r.remaining, r.reset, r.windows)
	}
	var v []any
	err := s.bounded(ctx, func(ctx context.Context) (err error) {
		v, err = counterScript.Eval(ctx, s.rdb, []string{s.wins[0].key}, args...).Slice()
		return err
	})
	if err != nil {
		return countersApplied{}, err
	}
	if len(v) != 3 {
		return countersApplied{}, errors.New("throttler: short reply from the counters script")
	}
	var out countersApplied
	lim, _ := v[0].(int64)
	out.limit = int(lim)
	end, _ := v[1].(string)
	out.end, _ = strconv.ParseInt(end, 10, 64)
	zero, _ := v[2].(string)
	out.zeroUntil, _ = strconv.ParseInt(zero, 10, 64)
	return out, nil
}

// readCounters counts the members of the first key scored in (from, to]
// and reads the lowered limit and the last back-off.
func (s *redisStore) readCounters(ctx context.Context, from, to int64) (countersRead, error) {
	var (
		used *redis.IntCmd
		meta *redis.FloatSliceCmd
	)
	err := s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if to > from {
				used = p.ZCount(ctx, s.wins[0].key, exclusive(from), itoa(to))
			}
			meta = p.ZMScore(ctx, s.wins[0].key, limitMember, limitEndMember, backoffMember, backoffEndMember)
			return nil
		})
		return err
	})
	if err != nil {
		return countersRead{}, err
	}
	var r countersRead
	if used != nil {
		r.used = int(used.Val())
	}
	m := meta.Val()
	if len(m) != 4 {
		return countersRead{}, errors.New("throttler: short ZMSCORE reply")
	}
	r.limit, r.limitEnd, r.backoff, r.backoffEnd = metaValue(m[0]), metaValue(m[1]), metaValue(m[2]), metaValue(m[3])
	return r, nil
}
