package redisstore

import (
	"context"
	"fmt"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// A compacted window keeps a member per call only for its newest calls. A
// call scored more than the window's age (core.Window.Age, µs) before the
// server's clock, or behind the newest core.Window.Keep calls, is moved,
// by CompactScript, from the sorted set into a count per bucket, whether
// its bucket has ended or not: the buckets cut the server's clock into
// spans of core.Window.Bucket µs, bucket k being [k*b, (k+1)*b). The counts live in a hash beside the set
// (CompactKey), cumulative so that any run of buckets is counted with two
// reads:
//
//	b        the bucket width (µs), set by the first compaction: every
//	         process uses the width found here, whatever its own
//	lo, hi   the buckets kept: lo..hi, every one present (hi < lo: none)
//	base     the calls in every bucket before lo (dropped, or never kept)
//	n        the calls in every bucket up to hi
//	<k>      for lo <= k <= hi: the calls in every bucket up to k
//	cut      every call scored before cut (µs) has been moved, or was absent
//
// A count of the calls in (x, y) counts the set's members there plus every
// bucket that overlaps (x, y), wholly: a bucket's calls may lie anywhere in
// it. Counting whole buckets only adds, so every check that admits a call
// (no window holding it over the limit) holds for the calls themselves:
// the invariant stays exact, and a saturated key loses at most a bucket's
// share of its window (1/core.Buckets). A compaction is one script, so a
// count sees every call either as a member or in its bucket, never in both
// or neither.
//
// A call given back after it was moved leaves its bucket when the
// process knows it was written (see GiveBackScript).
//
// Compaction runs with a round trip's trim, and after a process added
// Keep calls; while the buckets may hold calls that still count, the
// first key's flag (BucketMember) says so, and a process that keeps a
// member per call (its limit below the threshold, core.CompactFrom) counts
// them too once it has read the flag: processes disagreeing on a key's
// limit during a rollout still see each other's calls.

// CompactKey is the hash holding the buckets of the compacted window at key,
// in key's hash slot.
func CompactKey(key string) string { return "{" + HashTag(key) + "}:b:" + key }

// BucketMember, in a window's sorted set, states until when (server µs)
// its compacted calls (CompactKey) may still count: a process that reads a
// member per call counts the buckets too while it is there.
const BucketMember = "\x00bucketed"

// CompactBatch is the most calls one CompactScript run moves, which bounds
// how long it holds Redis (some milliseconds): a run that moves that many
// leaves the rest to the round trip after it.
const CompactBatch = 20_000

// DenseBucket is how many calls a bucket must hold, on average, for
// CompactScript to count them with a ZCOUNT per bucket rather than read
// them: a ZCOUNT costs Redis about as much as reading one or two members
// (BenchmarkCompactScript), and each is one more command; calls this dense
// are moved for a fraction of that.
const DenseBucket = 8

// RebuildFrom is the fewest calls a CompactScript run must move before it
// writes the set anew (when at most a quarter of it is left). A sorted set
// keeps the hashtable the most members it held grew, shrinking it one
// step per write: 200,000 members trimmed to 16 still take 2 MB on
// redis-server 7.0. Written anew, a set of up to 128 members (Redis's
// zset-max-listpack-entries) takes the compact encoding again.
const RebuildFrom = 128

// CompactScript moves the calls of KEYS[1] (the sorted set) scored before
// now-ARGV[2] (the age, µs) into their buckets in KEYS[2] (see
// CompactKey), at most ARGV[6] a run (CompactBatch; the oldest), and drops
// the buckets that end before now-ARGV[3] (µs: the window, its slack and
// the widest margin), with now the server's clock. ARGV[1] is the bucket
// width a new hash takes, ARGV[4] the hash's TTL (ms), which is also how
// long the flag member ARGV[5] states the buckets may count. Every call
// scored before the newest ARGV[8] (core.Window.Keep; 0: no such bound)
// moves too, whatever its age. A run that moves at least ARGV[7] calls
// (RebuildFrom) and leaves at most a quarter as many writes the set anew,
// so its memory shrinks with it; the set keeps its TTL. Every run writes
// a new stamp into the member ARGV[9] (see StampMember). Calls at least
// ARGV[10] (DenseBucket) a bucket are counted without being read. It
// returns the number of calls moved, and 1 when the run stopped at the
// batch (more may be left to move), else 0.
//
// A call that arrives scored before the cut (a late writer) is moved by the
// next run: added to its bucket's count and every later one, the counts
// stay true.
// A call older than every bucket kept is dropped: no window counts it.
var CompactScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function f(x) return string.format('%.0f', x) end
local pttl = redis.call('PTTL', KEYS[1])
local h = redis.call('HMGET', KEYS[2], 'b', 'lo', 'hi', 'n', 'base', 'cut')
local b = tonumber(h[1]) or tonumber(ARGV[1])
local function idx(s)
  local k = math.floor(s / b)
  if k * b > s then k = k - 1 elseif (k + 1) * b <= s then k = k + 1 end
  return k
end
local keep = idx(now - tonumber(ARGV[3]))
local cut = now - tonumber(ARGV[2])
-- All but the newest ARGV[8] calls move too, whatever their age.
if tonumber(ARGV[8]) > 0 then
  local z = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '(0', 'WITHSCORES', 'LIMIT', tonumber(ARGV[8]), 1)
  if #z > 0 then cut = math.max(cut, tonumber(z[2])) end
end
local lo, hi, n, base, was = tonumber(h[2]), tonumber(h[3]), tonumber(h[4]), tonumber(h[5]), tonumber(h[6])
if not hi then
  lo, hi, n, base, was = keep, keep - 1, 0, 0, 0
  redis.call('HSET', KEYS[2], 'b', f(b))
end
-- Tables keyed by bucket take the bucket's digits, not the number: an
-- interpreter may keep a table with integer keys as an array, and bucket
-- numbers (server µs / width) would make that array enormous.
local late, fresh = {}, {}
local moved = 0
-- c calls of bucket k move: a bucket kept takes them late, one after the
-- buckets kept fresh; one dropped already (before lo) no longer counts.
local function tally(k, c)
  moved = moved + c
  local key = f(k)
  if k > hi then
    fresh[key] = (fresh[key] or 0) + c
  elseif k >= lo then
    late[key] = (late[key] or 0) + c
  end
end
-- The calls to move, oldest first, at most a batch a run: a set that
-- starts compacting with a long log behind it is moved over several runs.
local batch = tonumber(ARGV[6])
local full = 0
if redis.call('ZCOUNT', KEYS[1], '(0', '(' .. f(cut)) >= batch then
  full = 1
  local s0 = tonumber(redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)[2])
  local s1 = tonumber(redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '+inf', 'WITHSCORES', 'LIMIT', batch - 1, 1)[2])
  if s1 > s0 then cut = s1 else cut = s1 + 1 end
end
local last = math.max(hi, idx(cut - 1))
-- The calls scored from the last cut on are counted a bucket at a time
-- (ZCOUNT) when they are at least ARGV[10] (DenseBucket) a bucket, as
-- calls close together are, over at most 128 buckets (each ZCOUNT is
-- O(log n) on Redis, but O(n) on miniredis): moving them then reads no
-- member. The others (calls behind the last cut, late writers, and calls
-- sparser or spread wider than that) are read and counted per bucket
-- here, in score order.
was = was or 0
local upto = cut
local k0, k1 = idx(was), idx(cut - 1)
if was > 0 and cut > was and k1 - k0 < 128 then
  if redis.call('ZCOUNT', KEYS[1], f(was), '(' .. f(cut)) >= tonumber(ARGV[10]) * (k1 - k0 + 1) then
    upto = was
    for k = k0, k1 do
      local c = redis.call('ZCOUNT', KEYS[1], f(math.max(k * b, was)), '(' .. f(math.min((k + 1) * b, cut)))
      if c > 0 then tally(k, c) end
    end
  end
end
local r = redis.call('ZRANGEBYSCORE', KEYS[1], '(0', '(' .. f(upto), 'WITHSCORES')
local k, from, to, c = 0, 0, -1, 0
for i = 2, #r, 2 do
  local s = tonumber(r[i])
  if s < from or s >= to then
    if c > 0 then tally(k, c) end
    k = idx(s)
    from, to, c = k * b, (k + 1) * b, 0
  end
  c = c + 1
end
if c > 0 then tally(k, c) end
if moved > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '(0', '(' .. f(cut)) end
-- A set that shrank to a quarter or less is written anew: a sorted set
-- keeps the hashtable its largest size grew (it shrinks one step per
-- write), and a small one rebuilt takes the compact encoding again.
local left = redis.call('ZCARD', KEYS[1])
if moved >= tonumber(ARGV[7]) and left * 4 <= moved then
  local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  redis.call('DEL', KEYS[1])
  for i = 1, #all, 400 do
    local zs = {}
    for j = i, math.min(i + 399, #all), 2 do
      zs[#zs + 1] = all[j + 1]
      zs[#zs + 1] = all[j]
    end
    redis.call('ZADD', KEYS[1], unpack(zs))
  end
end
-- A late call counts in its bucket and in every later one's total.
for key, c in pairs(late) do
  for j = tonumber(key), hi do redis.call('HINCRBY', KEYS[2], f(j), c) end
  n = n + c
end
-- The buckets that end before the oldest window still counted go.
if keep > lo then
  local dropTo = math.min(keep - 1, hi)
  if dropTo >= lo then
    if dropTo < hi then base = tonumber(redis.call('HGET', KEYS[2], f(dropTo))) else base = n end
    local del = {}
    for j = lo, dropTo do
      del[#del + 1] = f(j)
    end
    for i = 1, #del, 200 do
      redis.call('HDEL', KEYS[2], unpack(del, i, math.min(i + 199, #del)))
    end
  end
  lo = keep
end
if last > hi then
  -- Calls in buckets no window counts any more count only in base.
  for key, c in pairs(fresh) do
    if tonumber(key) < lo then n = n + c end
  end
  if lo > hi then base = n end
  local set = {}
  for j = math.max(hi + 1, lo), last do
    n = n + (fresh[f(j)] or 0)
    set[#set + 1] = f(j)
    set[#set + 1] = f(n)
  end
  for i = 1, #set, 400 do
    redis.call('HSET', KEYS[2], unpack(set, i, math.min(i + 399, #set)))
  end
  hi = last
end
redis.call('HSET', KEYS[2], 'lo', f(lo), 'hi', f(hi), 'n', f(n), 'base', f(base), 'cut', f(math.max(was or 0, cut)))
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('ZADD', KEYS[1], 'LT', f(-(now + tonumber(ARGV[4]) * 1000)), ARGV[5])
-- A new stamp: copies of the buckets taken before no longer stand.
local stamp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[9]) or '0')
redis.call('ZADD', KEYS[1], f(-math.max(now, 1 - stamp)), ARGV[9])
-- The set keeps its TTL, though it was emptied or written anew; one the
-- flag made lives as long as the buckets.
if redis.call('PTTL', KEYS[1]) == -1 then
  if pttl == -2 then pttl = tonumber(ARGV[4]) end
  if pttl > 0 then redis.call('PEXPIRE', KEYS[1], pttl) end
end
return {moved, full}
`)

// CountScript reads a window that may be compacted (see CompactScript):
// KEYS[1] its sorted set, KEYS[2] its buckets. ARGV[1] is the number of
// ranges c, then per range its exclusive bounds x and y; then the number
// of tails, per tail the ranks from the top it spans (the first and the
// last, from 0: see tail); then the number of probes, per probe a member
// and its score; then, for the peaks (see peakAsk), the limit in force (0
// or absent: no peaks), the window w and the number of the attempt's own
// calls, then each one's score. It returns, per range, the calls in (x, y): members there
// and every bucket overlapping it; then per probe 1 when it is a member, or
// was scored before the cut in a bucket that holds a call or was dropped
// from the hash (it may have been compacted there), else 0 (a compacted
// call counts in its bucket while the bucket is kept: a probe scored in an
// empty one was lost, as after a failover to a copy behind that another
// process compacted since); then, when asked, per range (g-w, g+w) its
// peak: the most calls, not the attempt's own, in one window (t-w, t] with
// g <= t < g+w, each counted as the ranges count it (a member at its
// score, a compacted call in every window its bucket overlaps), or -1
// where the count decides as well: when it is within the limit, or no
// call but the attempt's own comes after g (neither a member nor a
// bucket that starts after g's); such a window holds the most at t = g,
// at a member's score or at a bucket's first microsecond (see
// PeakScript, which reads a log's); then per
// tail its length and its entries, ascending, a score and a
// member each, ranked among the members at their scores and the compacted
// calls at their buckets' last microsecond with an empty member: that is
// where the counts place a compacted call (a slot worked out from an
// earlier score would be refused by a count of the whole bucket). A tail
// stops where the calls run out.
var CountScript = redis.NewScript(`
local function f(x) return string.format('%.0f', x) end
local h = redis.call('HMGET', KEYS[2], 'b', 'lo', 'hi', 'n', 'base', 'cut')
local b, lo, hi, n, base, cut = tonumber(h[1]), tonumber(h[2]), tonumber(h[3]), tonumber(h[4]), tonumber(h[5]), tonumber(h[6])
if not hi then b, lo, hi, n, base, cut = 1, 1, 0, 0, 0, 0 end
local function idx(s)
  local k = math.floor(s / b)
  if k * b > s then k = k - 1 elseif (k + 1) * b <= s then k = k + 1 end
  return k
end
local function cum(k)
  if k < lo then return base end
  if k >= hi then return n end
  return tonumber(redis.call('HGET', KEYS[2], f(k)))
end
-- The tails walk the totals bucket by bucket: they read them 128 at a
-- time, each run once (an HGET per bucket cost hundreds of commands).
local chunks = {}
local function walk(k)
  if k < lo then return base end
  if k >= hi then return n end
  local i = math.floor((k - lo) / 128)
  local got = chunks[i + 1]
  if not got then
    local fs = {}
    for j = lo + i * 128, math.min(lo + i * 128 + 127, hi - 1) do fs[#fs + 1] = f(j) end
    got = redis.call('HMGET', KEYS[2], unpack(fs))
    chunks[i + 1] = got
  end
  return tonumber(got[k - lo - i * 128 + 1])
end
local out = {}
local c = tonumber(ARGV[1])
for i = 0, c - 1 do
  local x, y = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  local count = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[2 + 2 * i], '(' .. ARGV[3 + 2 * i])
  local k0, k1 = idx(x), idx(y - 1)
  if (k0 + 1) * b - 1 <= x then k0 = k0 + 1 end
  k0, k1 = math.max(k0, lo), math.min(k1, hi)
  if k0 <= k1 then count = count + cum(k1) - cum(k0 - 1) end
  out[#out + 1] = count
end
local at = 2 + 2 * c
local tails = tonumber(ARGV[at])
local pat = at + 1 + 2 * tails
for j = 1, tonumber(ARGV[pat]) do
  local probe, s = ARGV[pat + 2 * j - 1], tonumber(ARGV[pat + 2 * j])
  local held = redis.call('ZSCORE', KEYS[1], probe)
  if not held and s < cut then
    -- Moved into its bucket, if that bucket holds a call, or was dropped
    -- from the hash (nothing tells then); an empty one never held it.
    local k = idx(s)
    held = k < lo or cum(k) > cum(k - 1)
  end
  if held then out[#out + 1] = 1 else out[#out + 1] = 0 end
end
local pp = pat + 1 + 2 * tonumber(ARGV[pat])
local plimit = tonumber(ARGV[pp] or 0)
if plimit > 0 then
  local w = tonumber(ARGV[pp + 1])
  local ours = {}
  for j = 1, tonumber(ARGV[pp + 2]) do ours[j] = tonumber(ARGV[pp + 2 + j]) end
  local function oursIn(x, t) -- the attempt's own calls in (x, t]
    local m = 0
    for _, s in ipairs(ours) do
      if s > x and s <= t then m = m + 1 end
    end
    return m
  end
  -- The calls, not the attempt's own, in (t-w, t], counted as a range is.
  local function window(t)
    local x = t - w
    local m = redis.call('ZCOUNT', KEYS[1], '(' .. f(x), f(t))
    local k0, k1 = idx(x), idx(t)
    if (k0 + 1) * b - 1 <= x then k0 = k0 + 1 end
    k0, k1 = math.max(k0, lo), math.min(k1, hi)
    if k0 <= k1 then m = m + walk(k1) - walk(k0 - 1) end
    return m - oursIn(x, t)
  end
  for i = 0, c - 1 do
    local peak = -1
    if out[i + 1] > plimit then
      local g = tonumber(ARGV[2 + 2 * i]) + w
      -- Where a window holding g may hold more than the one ending at g:
      -- the members after g, and the buckets after g's that hold calls.
      local r = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. f(g), '(' .. f(g + w), 'WITHSCORES')
      local others = #r / 2 - oursIn(g, g + w - 1)
      local at = {}
      for j = 2, #r, 2 do
        local s = tonumber(r[j])
        if at[#at] ~= s then at[#at + 1] = s end
      end
      local k0, k1 = math.max(idx(g) + 1, lo), math.min(idx(g + w - 1), hi)
      if k0 <= k1 and walk(k1) > walk(k0 - 1) then
        for k = k0, k1 do
          if walk(k) > walk(k - 1) then
            others = others + 1
            at[#at + 1] = k * b
          end
        end
      end
      if others > 0 then
        peak = window(g)
        for _, t in ipairs(at) do
          local m = window(t)
          if m > peak then peak = m end
        end
      end
    end
    out[#out + 1] = peak
  end
end
for j = 0, tails - 1 do
  local oldest, newest = tonumber(ARGV[at + 1 + 2 * j]), tonumber(ARGV[at + 2 + 2 * j])
  -- Far under the limit the key holds no call of the ranks wanted: the
  -- tail is empty, known without reading every call (which, with a limit
  -- of millions, cost milliseconds of Lua per round trip).
  if redis.call('ZCOUNT', KEYS[1], '(0', '+inf') + (n - base) <= newest then
    out[#out + 1] = 0
  else
    local want = oldest + 1
    -- The newest calls of each kind, newest first: members at their scores,
    -- compacted calls at their buckets' last microsecond (where the counts
    -- place them: a member may be older than a compacted call of its own
    -- bucket, the one the cut runs through, or of an older one when it
    -- arrived late).
    local z = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '(0', 'WITHSCORES', 'LIMIT', 0, want)
    local comp = {} -- ascending
    local cn = math.min(want, n - base)
    if cn > 0 then
      -- The q-th compacted call lies in the first bucket whose total
      -- reaches q; walking up from the oldest one wanted finds the rest.
      local q = n - cn + 1
      local l, u = lo, hi
      while l < u do
        local mid = math.floor((l + u) / 2)
        if walk(mid) >= q then u = mid else l = mid + 1 end
      end
      local c = walk(l)
      for p = q, n do
        while c < p do
          l = l + 1
          c = walk(l)
        end
        comp[#comp + 1] = (l + 1) * b - 1
      end
    end
    -- Merged, newest first, down to the oldest rank wanted.
    local merged = {}
    local i, k = 1, #comp
    while #merged < 2 * want and (i <= #z or k >= 1) do
      local zs = tonumber(z[i + 1])
      if zs and (k < 1 or zs >= comp[k]) then
        merged[#merged + 1] = zs
        merged[#merged + 1] = z[i]
        i = i + 2
      else
        merged[#merged + 1] = comp[k]
        merged[#merged + 1] = ''
        k = k - 1
      end
    end
    local entries = {}
    for r = math.min(oldest, #merged / 2 - 1), newest, -1 do
      entries[#entries + 1] = merged[2 * r + 1]
      entries[#entries + 1] = merged[2 * r + 2]
    end
    out[#out + 1] = #entries / 2
    for _, e in ipairs(entries) do out[#out + 1] = e end
  end
end
return out
`)

// countRange is one range a CountScript counts, by its exclusive bounds.
type countRange struct{ x, y int64 }

// tailSpan is the ranks from the top (0 = the newest call) a tail read
// spans, the oldest first.
type tailSpan struct{ oldest, newest int }

// peakAsk asks CountScript for the peak of each range (g-w, g+w), as
// PeakScript reads a log's: above limit, the limit in force (0: no
// peaks), in windows of w, without the attempt's own calls, scored ours.
type peakAsk struct {
	limit int
	w     int64
	ours  []int64
}

// countCmd queues CountScript on window x for ranges, tails, probes and
// peaks.
func countCmd(ctx context.Context, p redis.Pipeliner, x core.Window, ranges []countRange, tails []tailSpan, probes []core.Entry, peaks peakAsk) *redis.Cmd {
	return CountScript.Eval(ctx, p, []string{x.Key, CompactKey(x.Key)}, countArgs(ranges, tails, probes, peaks)...)
}

// countArgs are CountScript's arguments for ranges, tails, probes and
// peaks.
func countArgs(ranges []countRange, tails []tailSpan, probes []core.Entry, peaks peakAsk) []any {
	args := make([]any, 0, 6+2*len(ranges)+2*len(tails)+2*len(probes)+len(peaks.ours))
	args = append(args, len(ranges))
	for _, r := range ranges {
		args = append(args, itoa(r.x), itoa(r.y))
	}
	args = append(args, len(tails))
	for _, s := range tails {
		args = append(args, s.oldest, s.newest)
	}
	args = append(args, len(probes))
	for _, e := range probes {
		args = append(args, e.Member, itoa(e.Score))
	}
	if peaks.limit <= 0 {
		return append(args, 0)
	}
	args = append(args, peaks.limit, itoa(peaks.w), len(peaks.ours))
	for _, s := range peaks.ours {
		args = append(args, itoa(s))
	}
	return args
}

// countRead is what CountScript answered.
type countRead struct {
	counts []int64
	probed []bool  // per probe: it is there, or may have been compacted
	peaks  []int64 // per range, when asked (see peakAsk)
	tails  [][]core.Entry
}

// readCount splits CountScript's answer for ranges, probes, the ranges'
// peaks when asked (peaks), and tails.
func readCount(cmd *redis.Cmd, ranges, probes int, peaks bool, tails int) (countRead, error) {
	vals, err := cmd.Slice()
	if err != nil {
		return countRead{}, err
	}
	peaked := 0
	if peaks {
		peaked = ranges
	}
	bad := func() (countRead, error) {
		return countRead{}, fmt.Errorf("throttler: the count script answered %d values for %d ranges, %d probes, %d peaks and %d tails", len(vals), ranges, probes, peaked, tails)
	}
	if len(vals) < ranges+probes+peaked+tails {
		return bad()
	}
	var r countRead
	for _, v := range vals[:ranges] {
		n, ok := v.(int64)
		if !ok {
			return bad()
		}
		r.counts = append(r.counts, n)
	}
	for _, v := range vals[ranges : ranges+probes] {
		r.probed = append(r.probed, v == int64(1))
	}
	for _, v := range vals[ranges+probes : ranges+probes+peaked] {
		n, ok := v.(int64)
		if !ok {
			return bad()
		}
		r.peaks = append(r.peaks, n)
	}
	rest := vals[ranges+probes+peaked:]
	for range tails {
		if len(rest) == 0 {
			return bad()
		}
		m, ok := rest[0].(int64)
		if !ok || len(rest) < 1+2*int(m) {
			return bad()
		}
		tail := make([]core.Entry, m)
		for i := range tail {
			score, ok1 := rest[1+2*i].(int64)
			member, ok2 := rest[2+2*i].(string)
			if !ok1 || !ok2 {
				return bad()
			}
			tail[i] = core.Entry{Score: score, Member: member}
		}
		r.tails = append(r.tails, tail)
		rest = rest[1+2*m:]
	}
	return r, nil
}
