package redisstore

import (
	"context"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// GiveBackScript gives back calls of the window at KEYS[1] (its buckets
// at KEYS[2], see CompactKey) that are known to have been written:
// ARGV[1] is the window (µs), then a score (µs) and a member per call. A
// member still in the set is removed, as ZREM would. One no longer there
// was moved into its bucket by a compaction when its score lies before
// the cut and within the window (after now-ARGV[1], with now the server's
// clock: a call that old may have been trimmed rather than moved), and
// its bucket is still kept: that bucket's count drops by one per such
// call, never below what it holds. Debt (core.DebtPrefix) is never given
// back. It returns the members removed and the bucket counts dropped.
//
// A member a write may not have added, or a give-back sent again after
// an error, must not come here: a count dropped for a call that is not
// in its bucket would let a window hold one call more than its limit.
// Those are removed with a plain ZREM, which, for a compacted call,
// leaves its slot counted until its bucket leaves the window.
var GiveBackScript = redis.NewScript(`
local function f(x) return string.format('%.0f', x) end
local removed = 0
local gone = {}
for i = 2, #ARGV, 2 do
  local m = ARGV[i + 1]
  if redis.call('ZREM', KEYS[1], m) == 1 then
    removed = removed + 1
  elseif string.sub(m, 1, 2) ~= '\0d' then
    gone[#gone + 1] = tonumber(ARGV[i])
  end
end
if #gone == 0 then return {removed, 0} end
local h = redis.call('HMGET', KEYS[2], 'b', 'lo', 'hi', 'n', 'cut', 'base')
local b, lo, hi, n, cut, base = tonumber(h[1]), tonumber(h[2]), tonumber(h[3]), tonumber(h[4]), tonumber(h[5]), tonumber(h[6])
if not hi then return {removed, 0} end
local t = redis.call('TIME')
local from = tonumber(t[1]) * 1000000 + tonumber(t[2]) - tonumber(ARGV[1])
-- Per bucket (keyed by its digits: see CompactScript), the calls moved
-- there to take out.
local dec, first = {}, nil
for _, s in ipairs(gone) do
  if s < cut and s > from then
    local k = math.floor(s / b)
    if k * b > s then k = k - 1 elseif (k + 1) * b <= s then k = k + 1 end
    if k >= lo and k <= hi then
      dec[f(k)] = (dec[f(k)] or 0) + 1
      if not first or k < first then first = k end
    end
  end
end
if not first then return {removed, 0} end
local function cum(j)
  if j < lo then return base end
  if j >= hi then return n end
  return tonumber(redis.call('HGET', KEYS[2], f(j)))
end
-- Every total from the first such bucket on drops by what the buckets up
-- to it give back, each bucket at most what it holds.
local dropped, prev = 0, cum(first - 1)
for j = first, hi do
  local c = cum(j)
  local d = dec[f(j)]
  if d then dropped = dropped + math.min(d, c - prev) end
  prev = c
  if dropped > 0 then redis.call('HSET', KEYS[2], f(j), f(c - dropped)) end
end
redis.call('HSET', KEYS[2], 'n', f(n - dropped))
return {removed, dropped}
`)

// giveBackCmd queues GiveBackScript on window x for calls written for
// sure.
func giveBackCmd(ctx context.Context, p redis.Pipeliner, x core.Window, calls []core.Entry) *redis.Cmd {
	args := make([]any, 0, 1+2*len(calls))
	args = append(args, x.W)
	for _, e := range calls {
		args = append(args, itoa(e.Score), e.Member)
	}
	return GiveBackScript.Eval(ctx, p, []string{x.Key, CompactKey(x.Key)}, args...)
}
