package redisstore

import (
	"context"
	"errors"
	"strconv"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// CounterScript applies readings of an API's own counter to the shared
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
var CounterScript = redis.NewScript(`
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

// ApplyCounters applies a batch of readings (see CounterScript).
func (s *Store) ApplyCounters(ctx context.Context, a core.CountersApply) (core.CountersApplied, error) {
	gradual := "0"
	if a.Gradual {
		gradual = "1"
	}
	args := make([]any, 0, 11+5*len(a.Readings))
	args = append(args, a.Limit, gradual, a.Interval, a.Tol, a.MaxFor, a.TTL, a.Channel,
		LimitMember, LimitEndMember, gradualBucketMember, gradualLimitMember)
	for _, r := range a.Readings {
		args = append(args, r.From, r.To, r.Remaining, r.Reset, r.Windows)
	}
	var v []any
	err := s.bounded(ctx, func(ctx context.Context) (err error) {
		v, err = CounterScript.Eval(ctx, s.rdb, []string{s.wins[0].Key}, args...).Slice()
		return err
	})
	if err != nil {
		return core.CountersApplied{}, err
	}
	if len(v) != 3 {
		return core.CountersApplied{}, errors.New("throttler: short reply from the counters script")
	}
	var out core.CountersApplied
	lim, _ := v[0].(int64)
	out.Limit = int(lim)
	end, _ := v[1].(string)
	out.End, _ = strconv.ParseInt(end, 10, 64)
	zero, _ := v[2].(string)
	out.ZeroUntil, _ = strconv.ParseInt(zero, 10, 64)
	return out, nil
}

// ReadCounters counts the members of the first key scored in (from, to]
// and reads the lowered limit and the last back-off.
func (s *Store) ReadCounters(ctx context.Context, from, to int64) (core.CountersRead, error) {
	var (
		used *redis.IntCmd
		meta *redis.FloatSliceCmd
	)
	err := s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if to > from {
				used = p.ZCount(ctx, s.wins[0].Key, exclusive(from), itoa(to))
			}
			meta = p.ZMScore(ctx, s.wins[0].Key, LimitMember, LimitEndMember, BackoffMember, BackoffEndMember)
			return nil
		})
		return err
	})
	if err != nil {
		return core.CountersRead{}, err
	}
	var r core.CountersRead
	if used != nil {
		r.Used = int(used.Val())
	}
	m := meta.Val()
	if len(m) != 4 {
		return core.CountersRead{}, errors.New("throttler: short ZMSCORE reply")
	}
	r.Limit, r.LimitEnd, r.Backoff, r.BackoffEnd = MetaValue(m[0]), MetaValue(m[1]), MetaValue(m[2]), MetaValue(m[3])
	return r, nil
}
