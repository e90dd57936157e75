package redisstore

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// Placing claims where Redis finds room (see core.Attempt.Place).
//
// A round near the limit claims slots worked out from the free slots the
// last reply told of, which Redis read a whole round trip before the
// claims reach it: a process whose round trips take 150ms claims slots
// that the processes with short round trips took in the meantime, and is
// refused round after round. So an exact round that counts every window
// as a log hands its claims to PlaceScript instead of adding them at
// their scores: the script puts each claim at the earliest score where
// its members fit under every window, as the set stands when Redis runs
// it, within the claim's bounds, then counts each placed claim's
// neighbourhood in every window after all of them are added. The counts
// decide, as ever (core.Resolve): the script is atomic, so a count sees
// exactly the state its own inserts produced, and every process that
// counts after it sees the members it added, as with ZADD and ZCOUNT in
// MULTI. Where the script puts a claim only decides how often a claim
// fits, never whether a count may be trusted.
//
// A window read compacted counts buckets the script does not read: such
// rounds add their claims at their scores, as before.

// PlaceScript places claims (see the comment above). KEYS: the windows'
// keys. ARGV: the number of windows n; the number of levels; a base score
// (server µs); 1 when the attempt is sent again, else 0; how far past the
// base members are garbage, not calls (see core.FutureBound); per window
// its w widened by the round's margin; per level, its cap under each
// window (n values); then per claim: its units N, its level, Floor less
// the base, Last less Floor, Reach less Floor (-1: none), and its N
// members (see core.Claim). Offsets rather than scores: a round on a slow
// link pays for every byte it sends.
//
// The claims go in order. One whose first member is already in the first
// key when the attempt is sent again (the first application placed it, its
// reply lost) keeps its score. One with Floor == Last goes there, whatever
// the set holds: now or never, its counts decide, under the limits the
// reply reads, as when claims are not placed. Any other goes where the
// client would put it from a reply's tails read now (core's nextSlots):
// with pos units placed before it, at the earliest score from Floor on at
// which, in every window, the member ranked cap-pos-N from the top of the
// set as it stood before any claim was added (garbage and -inf aside) lies
// w behind it. Past Last it is not placed, and past Reach neither are the
// claims after it (they would come later still). Once every claim is
// placed, it returns per claim its score (0: not placed), then per claim
// and per window the members within (g-w, g+w) (0 for a claim not
// placed).
var PlaceScript = redis.NewScript(`
local n, levels, base, again = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local w = {}
for i = 1, n do
  w[i] = tonumber(ARGV[5 + i])
end
local capsAt = 6 + n
local at = capsAt + levels * n
local claims, total, used = {}, 0, {}
while at <= #ARGV do
  local cl = {units = tonumber(ARGV[at]), level = tonumber(ARGV[at + 1]), floor = base + tonumber(ARGV[at + 2])}
  cl.last = cl.floor + tonumber(ARGV[at + 3])
  cl.reach = tonumber(ARGV[at + 4])
  if cl.reach < 0 then
    cl.reach = math.huge
  else
    cl.reach = cl.floor + cl.reach
  end
  cl.first = at + 5
  at = cl.first + cl.units
  claims[#claims + 1] = cl
  total = total + cl.units
  used[cl.level] = true
end
-- Per window and level: the scores ranked cap-total to cap-1 from the top
-- of the set as it stands (garbage aside), by rank.
local ranked = {}
local bound = '(' .. string.format('%.0f', base + tonumber(ARGV[5]))
for i = 1, n do
  local garbage = redis.call('ZCOUNT', KEYS[i], bound, '+inf')
  local card = redis.call('ZCARD', KEYS[i])
  ranked[i] = {}
  for l in pairs(used) do
    local cap = tonumber(ARGV[capsAt + l * n + i - 1])
    local hi, lo = cap - 1, math.max(cap - total, 0)
    local start, stop = card - 1 - hi - garbage, card - 1 - lo - garbage
    local byRank = {}
    if stop >= 0 and hi >= lo then
      local e = redis.call('ZRANGE', KEYS[i], math.max(start, 0), stop, 'WITHSCORES')
      for k = 1, #e / 2 do
        byRank[card - 1 - garbage - (math.max(start, 0) + k - 1)] = tonumber(e[2 * k])
      end
    end
    ranked[i][l] = {cap = cap, byRank = byRank}
  end
end
local placed = {}
local pos, stop = 0, false
for c, cl in ipairs(claims) do
  local g = 0
  local had = again and redis.call('ZSCORE', KEYS[1], ARGV[cl.first])
  if had then
    g = tonumber(had)
    pos = pos + cl.units
  elseif cl.floor == cl.last then
    g = cl.floor
    pos = pos + cl.units
  elseif not stop then
    g = cl.floor
    for i = 1, n do
      local r = ranked[i][cl.level]
      local rank = r.cap - pos - cl.units
      if rank < 0 then
        g = -1
        break
      end
      local v = r.byRank[rank]
      if v then
        g = math.max(g, v + w[i])
      end
    end
    if g > cl.reach then
      stop = true
    end
    if g < 0 or g > cl.last then
      g = 0
    else
      pos = pos + cl.units
    end
  end
  placed[c] = g
end
local z, counts = {}, {}
for c, cl in ipairs(claims) do
  if placed[c] > 0 then
    local s = string.format('%.0f', placed[c])
    for k = cl.first, cl.first + cl.units - 1 do
      z[#z + 1] = s
      z[#z + 1] = ARGV[k]
    end
  end
end
if #z > 0 then
  for i = 1, n do
    redis.call('ZADD', KEYS[i], unpack(z))
  end
end
local out = {}
for c = 1, #claims do
  out[c] = placed[c]
end
for c = 1, #claims do
  local g = placed[c]
  for i = 1, n do
    if g <= 0 then
      out[#out + 1] = 0
    else
      local key = i .. ':' .. string.format('%.0f', g)
      if not counts[key] then
        counts[key] = redis.call('ZCOUNT', KEYS[i], '(' .. string.format('%.0f', g - w[i]), '(' .. string.format('%.0f', g + w[i]))
      end
      out[#out + 1] = counts[key]
    end
  end
end
return out
`)

// placeable reports whether the attempt's claims are placed by
// PlaceScript: an exact attempt that asks for it, while every window is
// read as a log.
func (c *attemptCmds) placeable() bool {
	a := c.a
	if !a.Place || !a.Exact || len(a.Claims) == 0 {
		return false
	}
	for wi := range c.win {
		if _, log := c.win[wi].form.(logKey); !log {
			return false
		}
	}
	return true
}

// queuePlace queues PlaceScript for the attempt's claims, scored from
// a.Soonest.
func (c *attemptCmds) queuePlace(p redis.Pipeliner) *redis.Cmd {
	a, wins := c.a, c.s.wins
	keys := make([]string, len(wins))
	args := make([]any, 0, 5+len(wins)*(1+core.Levels)+len(a.Claims)*5+len(a.Adds))
	again := 0
	if a.Again {
		again = 1
	}
	args = append(args, len(wins), core.Levels, itoa(a.Soonest), again, itoa(core.FutureBound))
	for wi, x := range wins {
		keys[wi] = x.Key
		args = append(args, a.Reach(x))
	}
	for l := range core.Levels {
		for wi := range wins {
			args = append(args, a.Caps[l][wi])
		}
	}
	for _, cl := range a.Claims {
		reach := int64(-1)
		if cl.Reach < math.MaxInt64 {
			reach = cl.Reach - cl.Floor
		}
		args = append(args, cl.N, int(cl.Prio), itoa(cl.Floor-a.Soonest), itoa(cl.Last-cl.Floor), itoa(reach))
		for _, e := range a.Adds[cl.First : cl.First+cl.N] {
			args = append(args, e.Member)
		}
	}
	if c.s.placeLoaded.Load() {
		return PlaceScript.EvalSha(c.ctx, p, keys, args...)
	}
	return PlaceScript.Eval(c.ctx, p, keys, args...)
}

// scriptLost reports whether the only command of done (a round trip's,
// which failed) that failed is PlaceScript called by its digest on a
// server that does not know it (restarted, failed over, its scripts
// flushed): every other command ran, and the claims were not added. The
// next round sends the script's text (see placeReply).
func (c *attemptCmds) scriptLost(done []redis.Cmder) bool {
	if c.place == nil || !isNoScript(c.place.Err()) {
		return false
	}
	for _, cmd := range done {
		if cmd != c.place && cmd.Err() != nil && !errors.Is(cmd.Err(), redis.Nil) {
			return false
		}
	}
	return true
}

// isNoScript reports whether err is the server's NOSCRIPT.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// placeReply reads PlaceScript's answer into r: the placed scores, and
// each window's counts per check once the attempt's members are moved to
// them (see core.Attempt.SetPlaced).
func (c *attemptCmds) placeReply(r *core.Reply) error {
	a, nw := c.a, len(c.s.wins)
	if isNoScript(c.place.Err()) {
		// Not run (see scriptLost): no claim was placed, and the next
		// round sends the script itself.
		c.s.placeLoaded.Store(false)
		r.Placed = make([]int64, len(a.Claims))
		a.SetPlaced(r.Placed)
		for wi := range nw {
			r.Counts[wi] = nil
		}
		return nil
	}
	v, err := c.place.Int64Slice()
	if err == nil && len(v) != len(a.Claims)*(1+nw) {
		err = fmt.Errorf("throttler: the place script answered %d values for %d claims", len(v), len(a.Claims))
	}
	if err != nil {
		return err
	}
	c.s.placeLoaded.Store(true)
	r.Placed = v[:len(a.Claims)]
	a.SetPlaced(r.Placed)
	counts := v[len(a.Claims):]
	for wi := range nw {
		r.Counts[wi] = make([]int64, len(a.Checks))
	}
	for ci, g := range r.Placed {
		if g <= 0 {
			continue
		}
		i := 0
		for a.Checks[i] != g {
			i++
		}
		for wi := range nw {
			r.Counts[wi][i] = counts[ci*nw+wi]
		}
	}
	return nil
}

// unplaced returns the members of zs (the attempt's adds, then the
// marker) that are not the claims' (replays, the marker): PlaceScript adds
// the claims'.
func (c *attemptCmds) unplaced(zs []redis.Z) []redis.Z {
	a := c.a
	claimed := make([]bool, len(a.Adds))
	for _, cl := range a.Claims {
		for j := cl.First; j < cl.First+cl.N; j++ {
			claimed[j] = true
		}
	}
	out := make([]redis.Z, 0, len(zs))
	for i, z := range zs {
		if i >= len(claimed) || !claimed[i] {
			out = append(out, z)
		}
	}
	return out
}
