package redisstore

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// PeakScript counts the neighbourhoods of an exact attempt's scores on one
// key (KEYS[1]) and, where it matters, the most members in any one window
// that holds the score. ARGV[1] is w (µs), ARGV[2] the limit in force,
// ARGV[3] the number of scores c; then, per score g, g and the exclusive
// bounds "(g-w", "(g+w" and "(g" (formatted in Go: Lua would print a
// score in microseconds as a float); then the attempt's own members, each
// with its score. It returns, per score, the members in (g-w, g+w) (what
// ZCOUNT would), then the peak: the most of them, not the attempt's own,
// in one window (t-w, t] with g <= t < g+w, as core.Peak computes it; or
// -1 where the count decides as well: when it is within the limit, or no
// other member lies after g (the window that ends at g then holds every
// other member the count holds).
//
// Such a window holds the most at t = g or at a member's score after g,
// so the script reads the members after g (those reserved ahead of it),
// counts those in (g-w, g], and reads the ones among them that the window
// leaves behind as t moves from g to the last member after g (those in
// (g-w, t-w]): four commands per score, however many calls are reserved
// ahead of it, and it reads at most the members of (g-w, g+w).
//
// The neighbourhood's count alone refuses a call that every window holding
// it has room for when members on both sides of it, more than w apart,
// add up to the limit: a slot left free behind the tail, where no replica
// plans again (see core.Reply.Peaks). Under one limit the window gives
// that room back at the tail, where the next free slot comes as much
// sooner; under several, another limit binding there keeps the loss. So
// only a Throttler with several limits runs the script (in its exact
// rounds), and pays in Redis time for the members after g it reads. A
// compacted window's CountScript reads the same peaks, counting a bucket
// in every window it overlaps, as its counts do (see peakAsk).
var PeakScript = redis.NewScript(`
local w = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local c = tonumber(ARGV[3])
local base = 4 + 4 * c
local oursName, oursAt
local function oursIn(lo, hi)
  local n = 0
  for _, s in ipairs(oursAt) do
    if s > lo and s <= hi then n = n + 1 end
  end
  return n
end
local out = {}
for j = 0, c - 1 do
  local k = 4 + 4 * j
  local g = tonumber(ARGV[k])
  local lo, hi, after = ARGV[k + 1], ARGV[k + 2], ARGV[k + 3]
  local count = redis.call('ZCOUNT', KEYS[1], lo, hi)
  local peak = -1
  if count > limit then
    if not oursAt then
      oursName, oursAt = {}, {}
      for i = base, #ARGV, 2 do
        oursName[ARGV[i]] = true
        oursAt[#oursAt + 1] = tonumber(ARGV[i + 1])
      end
    end
    local r = redis.call('ZRANGEBYSCORE', KEYS[1], after, hi, 'WITHSCORES')
    local b = {}
    for i = 1, #r, 2 do
      if not oursName[r[i]] then b[#b + 1] = tonumber(r[i + 1]) end
    end
    if #b > 0 then
      local held = redis.call('ZCOUNT', KEYS[1], lo, ARGV[k]) - oursIn(g - w, g)
      local l, left = redis.call('ZRANGEBYSCORE', KEYS[1], lo, string.format('%.0f', b[#b] - w), 'WITHSCORES'), {}
      for i = 1, #l, 2 do
        if not oursName[l[i]] then left[#left + 1] = tonumber(l[i + 1]) end
      end
      peak = held
      local gone = 0
      for i = 1, #b do
        local t = b[i]
        if i == #b or b[i + 1] > t then
          while gone < #left and left[gone + 1] <= t - w do gone = gone + 1 end
          if held - gone + i > peak then peak = held - gone + i end
        end
      end
    end
  end
  out[#out + 1] = count
  out[#out + 1] = peak
end
return out
`)

// readsPeaks reports whether the attempt reads each score's peak (see
// PeakScript, and CountScript for a compacted window): an exact attempt
// that checks scores, under several limits or while a tenant is held to a
// cap (see core.TenantAsk).
func (c *attemptCmds) readsPeaks() bool {
	return c.a.Exact && len(c.a.Checks) > 0 && (len(c.s.wins) > 1 || c.tenantPeaks())
}

// peakCmd queues PeakScript for the attempt's scores on the key of window
// wi, whose window (widened by the attempt's margin) is w and whose limit
// in force is limit; or TenantPeakScript on the first key, when the
// attempt also reads capped tenants' members there.
func (c *attemptCmds) peakCmd(p redis.Pipeliner, wi int, w int64, limit int) *redis.Cmd {
	a, key := c.a, c.s.wins[wi].Key
	if wi == 0 && c.capsRead() {
		return c.tenantPeakCmd(p, key, w, limit)
	}
	args := make([]any, 0, 3+4*len(a.Checks)+2*len(a.Adds))
	args = append(args, w, limit, len(a.Checks))
	for _, g := range a.Checks {
		args = append(args, itoa(g), exclusive(g-w), exclusive(g+w), exclusive(g))
	}
	for _, e := range a.Adds {
		args = append(args, e.Member, itoa(e.Score))
	}
	return PeakScript.Eval(c.ctx, p, []string{key}, args...)
}

// readPeaks splits PeakScript's answer (or the first part of
// TenantPeakScript's, which lists follow) into the counts and peaks of one
// window, per check.
func readPeaks(cmd *redis.Cmd, checks, lists int) (counts, peaks []int64, err error) {
	vals, err := cmd.Slice()
	if err == nil && len(vals) != 2*checks+lists {
		err = fmt.Errorf("throttler: the peak script answered %d values for %d scores", len(vals), checks)
	}
	if err != nil {
		return nil, nil, err
	}
	counts, peaks = make([]int64, checks), make([]int64, checks)
	for i := range checks {
		n, ok1 := vals[2*i].(int64)
		peak, ok2 := vals[2*i+1].(int64)
		if !ok1 || !ok2 {
			return nil, nil, fmt.Errorf("throttler: the peak script answered %v, %v", vals[2*i], vals[2*i+1])
		}
		counts[i], peaks[i] = n, peak
	}
	return counts, peaks, nil
}
