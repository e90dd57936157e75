package redisstore

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// A tenant's call carries its tenant at the end of its member's name: a
// suffix of TenantSuffixLen bytes, "\x00t", a flag ('w' when the call
// waited behind others of its tenant, else '-'), then the tenant's tag: 8
// characters of the tenant's digest and its weight in thousandths in 6
// digits. Nothing else is kept per tenant: a tenant's state in Redis is
// its calls' 17 more bytes each, and leaves with them.

// TenantSuffixLen is the length of TenantSuffix's suffixes, and
// tenantTagLen that of the tag they end with.
const (
	TenantSuffixLen = 3 + tenantTagLen
	tenantTagLen    = 8 + 6
)

// TenantSuffix returns the suffix of the members of tenant's calls, of
// weight weight (at most 999.999: more counts as that), flagged as not
// waited.
func TenantSuffix(tenant string, weight float64) string {
	sum := sha256.Sum256([]byte(tenant))
	w := min(max(int(weight*1000+0.5), 1), 999999)
	return fmt.Sprintf("\x00t-%s%06d", base64.RawURLEncoding.EncodeToString(sum[:6]), w)
}

// TenantWaited returns suffix flagged as waited, or not.
func TenantWaited(suffix string, waited bool) string {
	flag := byte('-')
	if waited {
		flag = 'w'
	}
	if len(suffix) != TenantSuffixLen || suffix[2] == flag {
		return suffix
	}
	return suffix[:2] + string(flag) + suffix[3:]
}

// TenantTag returns the tag a suffix ends with: its tenant and weight.
func TenantTag(suffix string) string { return suffix[len(suffix)-tenantTagLen:] }

// TenantSuffixOf returns the suffix member ends with, "" when it is not a
// tenant's call's.
func TenantSuffixOf(member string) string {
	if len(member) <= TenantSuffixLen {
		return ""
	}
	suffix := member[len(member)-TenantSuffixLen:]
	if suffix[:2] != "\x00t" {
		return ""
	}
	return suffix
}

// scanLua defines scanTenants, which TenantScript and TenantPeakScript
// share. scanTenants(r, from, w, skip) counts the members of r (a
// ZRANGEBYSCORE WITHSCORES answer, ascending) scored after from - w
// (exclusive), but those in the set skip (nil: none): see TenantScript
// for what it returns.
const scanLua = `
local function scanTenants(r, from, w, skip)
  local n, waited, first, last, order, seen, none = {}, {}, {}, {}, {}, {}, 0
  for j = 1, #r, 2 do
    local m, s = r[j], tonumber(r[j + 1])
    if s <= from - w or (skip and skip[m]) then
      -- before the scan's range, or removed by the script
    elseif not (#m > 17 and m:sub(-17, -16) == '\0t') then
      if s > from then none = none + 1 end
    else
      local tag = m:sub(-14)
      if not n[tag] then
        n[tag], waited[tag] = 0, 0
        order[#order + 1] = tag
      end
      if s > from then
        n[tag] = n[tag] + 1
        if not first[tag] then first[tag] = s end
      end
      if m:sub(-15, -15) == 'w' then waited[tag] = waited[tag] + 1 end
      last[tag] = s
      seen[#seen + 1] = {s, tag}
    end
  end
  local peak, lo, light = 0, 1, {}
  for i, e in ipairs(seen) do
    if waited[e[2]] == 0 then
      light[#light + 1] = e[1]
      while light[lo] <= e[1] - w do lo = lo + 1 end
      peak = math.max(peak, #light - lo + 1)
    end
  end
  local out = {peak, none}
  for _, tag in ipairs(order) do
    out[#out + 1] = tag
    out[#out + 1] = n[tag]
    out[#out + 1] = waited[tag]
    out[#out + 1] = first[tag] or 0
    out[#out + 1] = last[tag]
  end
  return out
end
`

// TenantScript counts the members of KEYS[1] scored after ARGV[1]
// (exclusive) by the tenant their suffix names (see TenantSuffix), and
// returns first the most calls of the tenants none of whose calls waited
// (the light tenants) that any window of ARGV[2] µs after ARGV[1] - ARGV[2]
// held, then how many members without a suffix (of no tenant) are scored
// after ARGV[1], then, for each tenant in the order first met, its tag,
// its count, how many of its members waited (counted after ARGV[1] -
// ARGV[2], the window before included, so it may exceed the count), its
// oldest member's score after ARGV[1] (0: none) and its newest member's
// score. A round that runs
// TenantPeakScript has it scan instead, in the same read.
var TenantScript = redis.NewScript(scanLua + `
local from, w = tonumber(ARGV[1]), tonumber(ARGV[2])
-- (a number joined to a string keeps 14 digits: string.format keeps all)
local r = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', from - w), '+inf', 'WITHSCORES')
return scanTenants(r, from, w, nil)
`)

// capsLua defines readCaps, which the scripts that read the capped
// tenants' members share. readCaps(r, at, key) reads the members of the
// capped tenants in r (a ZRANGEBYSCORE WITHSCORES answer on key) and
// checks each tenant's claims, in order, against its cap, from ARGV[at]
// on (see capsArgs): the window w (µs), whether to remove the claims
// refused ('1'), the asking process's prefix (its members' names begin
// with it), the number of tenants, then per tenant its tag, its cap and
// its number of claims, and per claim its units n and its n members. A
// claim whose tenant would hold more than its cap (or n, when n is more)
// in some window of w µs that holds it, beside the tenant's other members
// and the claims before it that were kept, is refused, and so is every
// claim of that tenant after a refused one, for a tenant's calls go in
// the order they came (a smaller call that fits where a larger one
// before it did not would take the room the larger waits for, window
// after window: seed 40248). A refused claim counts for
// nothing after, and its members leave key when asked, all the refused
// claims' in one ZREM per 1,000 members once every tenant is checked (a
// compacted key's give-back does more than remove a member, and the
// process gives them back). (Every window
// then holds at most the cap: the last claim kept in it was checked with
// all the others.) A claim whose members are not in r (the store placed
// it elsewhere, or not at all) is not checked. It returns, per tenant,
// how many processes other than the asking one hold its members in r, how
// many of its claims were refused, their positions, then its members'
// scores, ascending, the asking process's own negated (its debt, whose
// names begin with core.DebtPrefix before its prefix, among them); and,
// second, the
// members it removed (none unless asked).
const capsLua = `
-- the first index of l (ascending by absolute value) from i on whose
-- absolute value is above x
local function above(l, x, i)
  local hi = #l + 1
  while i < hi do
    local mid = math.floor((i + hi) / 2)
    if math.abs(l[mid]) <= x then i = mid + 1 else hi = mid end
  end
  return i
end
-- the most members of l in any window (t-w, t] that holds g: t is g or
-- one of the scores in (g, g+w), where the count can only rise; found by
-- halving, so a claim at the frontier costs a few steps, not the list
local function peakIn(l, g, w)
  local lo, hi = above(l, g - w, 1), above(l, g, 1)
  local best = hi - lo
  while hi <= #l and math.abs(l[hi]) < g + w do
    local t = math.abs(l[hi])
    hi = above(l, t, hi)
    while math.abs(l[lo]) <= t - w do lo = lo + 1 end
    if hi - lo > best then best = hi - lo end
  end
  return best
end
local function readCaps(r, at, key)
  local w, drop, own, nt = tonumber(ARGV[at]), ARGV[at + 1] == '1', ARGV[at + 2], tonumber(ARGV[at + 3])
  local byTag, ts, claimOf, i = {}, {}, {}, at + 4
  for k = 1, nt do
    local t = {cap = tonumber(ARGV[i + 1]), claims = {}, procs = {}, others = 0, list = {}}
    byTag[ARGV[i]], ts[k] = t, t
    local nc = tonumber(ARGV[i + 2])
    i = i + 3
    for c = 1, nc do
      local cl = {n = tonumber(ARGV[i]), members = {}}
      for j = 1, cl.n do
        cl.members[j] = ARGV[i + j]
        claimOf[ARGV[i + j]] = cl
      end
      t.claims[c] = cl
      i = i + 1 + cl.n
    end
  end
  for j = 1, #r, 2 do
    local m = r[j]
    if #m > 17 and m:sub(-17, -16) == '\0t' then
      local t = byTag[m:sub(-14)]
      if t then
        -- a process's debt (core.DebtPrefix) is its own as its calls are
        local name = m:sub(1, 2) == '\0d' and m:sub(3) or m
        local s, p = tonumber(r[j + 1]), name:sub(1, #own)
        local cl = claimOf[m]
        if cl then
          cl.score = s
        elseif #own > 0 and p == own then
          t.list[#t.list + 1] = -s
        else
          if #own > 0 and not t.procs[p] then
            t.procs[p], t.others = true, t.others + 1
          end
          t.list[#t.list + 1] = s
        end
      end
    end
  end
  local out, gone = {}, {}
  for k, t in ipairs(ts) do
    local refused = {}
    for c, cl in ipairs(t.claims) do
      if cl.score then
        local at = above(t.list, cl.score, 1)
        for _ = 1, cl.n do table.insert(t.list, at, -cl.score) end
        if #refused > 0 or peakIn(t.list, cl.score, w) > math.max(t.cap, cl.n) then
          refused[#refused + 1] = c
          for _ = 1, cl.n do table.remove(t.list, at) end
          for _, m in ipairs(drop and cl.members or {}) do gone[#gone + 1] = m end
        end
      end
    end
    local o = {t.others, #refused}
    for _, c in ipairs(refused) do o[#o + 1] = c end
    for _, v in ipairs(t.list) do o[#o + 1] = v end
    out[k] = o
  end
  for j = 1, #gone, 1000 do
    redis.call('ZREM', key, unpack(gone, j, math.min(j + 999, #gone)))
  end
  return out, gone
end
`

// TenantScoresScript reads the capped tenants' members in KEYS[1] scored
// after ARGV[1] (exclusive), checks their claims against their caps, and
// returns readCaps's answer per tenant (see capsLua), what it reads from
// ARGV[2] on.
var TenantScoresScript = redis.NewScript(capsLua + `
local r = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'WITHSCORES')
local out = readCaps(r, 2, KEYS[1])
return out
`)

// TenantPeakScript is PeakScript and TenantScoresScript in one, for the
// first key of an exact round that counts its claims against their peaks
// while it claims for a capped tenant (see core.TenantAsk): it reads the
// members scored after ARGV[4] (exclusive) once, where the two scripts
// would read them twice and PeakScript count each score's windows with
// commands of their own; and it checks the capped tenants' claims. The
// counts hold the claims it refuses, as those of PeakScript before it
// would: the attempt's own claims are all in its counts, which
// core.Resolve takes them out of (peaks hold none of them). ARGV[1] is w (µs),
// ARGV[2] the limit in force, ARGV[3] the number of scores c, ARGV[5] the
// number of arguments L from ARGV[8] on that readCaps reads (see capsLua),
// then the c scores, and the attempt's own members, each with its score.
// ARGV[4] lies at or before every score less w, and before the capped
// tenants' members the round needs. When the round scans (ARGV[6] is not
// empty), it also does TenantScript's work, for ARGV[6] and ARGV[7], in
// the same read, widened to the scan's range, without the claims it
// removed: one script and one read a round where there were two. It
// returns PeakScript's answer for the c scores, then readCaps's answer
// per tenant, then, when it scans, TenantScript's answer.
var TenantPeakScript = redis.NewScript(capsLua + scanLua + `
local w, limit, c, nc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
local after, scan = tonumber(ARGV[4]), ARGV[6] ~= ''
local sfrom, sw = tonumber(ARGV[6]), tonumber(ARGV[7])
-- (a number joined to a string keeps 14 digits: string.format keeps all)
local lo, bound = after, ARGV[4]
if scan and sfrom - sw < after then lo, bound = sfrom - sw, string.format('%.0f', sfrom - sw) end
local read = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. bound, '+inf', 'WITHSCORES')
-- the peaks and the caps read after ARGV[4], as without the scan
local r = read
if lo < after then
  r = {}
  for j = 1, #read, 2 do
    if tonumber(read[j + 1]) > after then
      r[#r + 1], r[#r + 2] = read[j], read[j + 1]
    end
  end
end
local lists, gone = readCaps(r, 8, KEYS[1])
local ours = {}
for i = 8 + nc + c, #ARGV, 2 do ours[ARGV[i]] = true end
local all, others = {}, {}
for j = 1, #r, 2 do
  local m, s = r[j], tonumber(r[j + 1])
  all[#all + 1] = s
  if not ours[m] then others[#others + 1] = s end
end
-- how many of the ascending scores l are below x (or at most x, with eq)
local function rank(l, x, eq)
  local lo, hi = 0, #l
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if l[mid] < x or (eq and l[mid] == x) then lo = mid else hi = mid - 1 end
  end
  return lo
end
-- the members in (g-w, g+w), and the peak (see PeakScript)
local function peakAt(g)
  local count = rank(all, g + w, false) - rank(all, g - w, true)
  local from, upto, past = rank(others, g - w, true), rank(others, g, true), rank(others, g + w, false)
  if count <= limit or past == upto then return count, -1 end
  local held = upto - from
  local peak = held
  for i = upto + 1, past do
    if i == past or others[i + 1] > others[i] then
      peak = math.max(peak, held - (rank(others, others[i] - w, true) - from) + (i - upto))
    end
  end
  return count, peak
end
local out = {}
for j = 1, c do
  local count, peak = peakAt(tonumber(ARGV[7 + nc + j]))
  out[#out + 1], out[#out + 2] = count, peak
end
for _, l in ipairs(lists) do out[#out + 1] = l end
if scan then
  local skip = {}
  for _, m in ipairs(gone) do skip[m] = true end
  out[#out + 1] = scanTenants(read, sfrom, sw, skip)
end
return out
`)

// tenantCmds are a round trip's reads of the tenants' calls: the scan,
// and the capped tenants' members, read by TenantScoresScript or, with the
// first key's peaks, by TenantPeakScript (peaks), which then scans too
// (scanned).
type tenantCmds struct {
	scan, scores, peaks *redis.Cmd
	scanned             bool
}

// capsRead reports whether the attempt reads capped tenants' members.
func (c *attemptCmds) capsRead() bool { return len(c.a.Tenants.Caps) > 0 }

// tenantPeakCmd queues TenantPeakScript on key, the first, whose window
// (widened by the attempt's margin) is w and whose limit in force is
// limit: the capped tenants' claims checked against their caps, then
// PeakScript's counts and peaks for the attempt's scores, the capped
// tenants' members, and the scan when the attempt asks for one.
func (c *attemptCmds) tenantPeakCmd(p redis.Pipeliner, key string, w int64, limit int) *redis.Cmd {
	const head = 7
	a := c.a
	from, args := capsArgs(a, c.s.wins[0].W, c.capsDrop(), head, len(a.Checks)+2*len(a.Adds))
	nc := len(args) - head
	for _, g := range a.Checks {
		from = min(from, g-w)
		args = append(args, itoa(g))
	}
	for _, e := range a.Adds {
		args = append(args, e.Member, itoa(e.Score))
	}
	args[0], args[1], args[2], args[3], args[4], args[5], args[6] = w, limit, len(a.Checks), itoa(from), nc, "", 0
	if ask := a.Tenants; ask.Scan {
		args[5], args[6], c.tenants.scanned = itoa(ask.From), ask.W, true
	}
	c.tenants.peaks = TenantPeakScript.Eval(c.ctx, p, []string{key}, args...)
	return c.tenants.peaks
}

// queueTenants queues the reads of the capped tenants' members and the
// scan of the tenants' calls, when the attempt asks for them: after its
// claims are added, so that both count them, and the scan after the
// claims refused have left (under one limit: see capsDrop), so that it
// does not count them.
func (c *attemptCmds) queueTenants(p redis.Pipeliner) {
	ask, key := c.a.Tenants, []string{c.s.wins[0].Key}
	// Unless the first key's peaks read them, and scan too (see
	// tenantPeakCmd: its window's reads are queued before this).
	if c.capsRead() && c.tenants.peaks == nil {
		from, args := capsArgs(c.a, c.s.wins[0].W, c.capsDrop(), 1, 0)
		args[0] = from
		c.tenants.scores = TenantScoresScript.Eval(c.ctx, p, key, args...)
	}
	if ask.Scan && !c.tenants.scanned {
		c.tenants.scan = TenantScript.Eval(c.ctx, p, key, ask.From, ask.W)
	}
}

// capsArgs returns the earliest From of attempt a's capped tenants, and a
// script's arguments: head slots to fill, then what readCaps reads (see
// capsLua) for the first window w (µs), dropping the claims refused or
// not, with room for more after.
func capsArgs(a *core.Attempt, w int64, drop bool, head, more int) (from int64, args []any) {
	ask, flag := a.Tenants, 0
	if drop {
		flag = 1
	}
	from = ask.Caps[0].From
	args = make([]any, head, head+4+4*len(ask.Caps)+more)
	args = append(args, w, flag, ask.Own, len(ask.Caps))
	for _, cp := range ask.Caps {
		from = min(from, cp.From)
		args = append(args, cp.Tag, cp.Cap, len(cp.Claims))
		for _, cl := range cp.Claims {
			args = append(args, cl.N)
			for _, e := range a.Adds[cl.First : cl.First+cl.N] {
				args = append(args, e.Member)
			}
		}
	}
	return from, args
}

// tenantLists is how many lists the answer of window wi's peak script
// holds after its counts and peaks: one per capped tenant when it is
// TenantPeakScript's, and the scan's when that scans.
func (c *attemptCmds) tenantLists(wi int) int {
	switch {
	case wi != 0 || c.tenants.peaks == nil:
		return 0
	case c.tenants.scanned:
		return len(c.a.Tenants.Caps) + 1
	}
	return len(c.a.Tenants.Caps)
}

// tenantPeaks reports whether the attempt counts its claims against the
// fullest window that holds each (see core.TenantAsk.Peaks).
func (c *attemptCmds) tenantPeaks() bool { return c.a.Tenants.Peaks }

// readTenants reads the scan's and the capped tenants' answers into r.
func (c *attemptCmds) readTenants(r *core.Reply) error {
	if c.tenants.scan != nil {
		vals, err := c.tenants.scan.Slice()
		if err != nil {
			return err
		}
		if err := parseTenants(r, vals); err != nil {
			return err
		}
	}
	switch {
	case c.tenants.scores != nil:
		vals, err := c.tenants.scores.Slice()
		if err != nil {
			return err
		}
		return parseTenantScores(r, vals, c.a.Tenants.Caps, c.capsDrop())
	case c.tenants.peaks != nil:
		vals, err := c.tenants.peaks.Slice()
		if err != nil {
			return err
		}
		vals = vals[min(len(vals), 2*len(c.a.Checks)):]
		if c.tenants.scanned {
			if len(vals) == 0 {
				return fmt.Errorf("redisstore: tenant peaks answered no scan")
			}
			scan, _ := vals[len(vals)-1].([]any)
			if err := parseTenants(r, scan); err != nil {
				return err
			}
			vals = vals[:len(vals)-1]
		}
		return parseTenantScores(r, vals, c.a.Tenants.Caps, c.capsDrop())
	}
	return nil
}

// capsDrop reports whether the script that checks the capped tenants'
// claims removes those it refuses: when the first key is a log and the
// only one. A compacted key's give-back does more than remove a member:
// it counts a member it finds gone as one its bucket holds, so a claim
// removed by the script must never come to it. Under several limits the
// process gives the claims back in every key, and a key read as a log now
// may be read compacted by the time it does (another process's
// compaction): the script leaves them.
func (c *attemptCmds) capsDrop() bool {
	_, log := c.win[0].form.(logKey)
	return log && len(c.s.wins) == 1
}

// parseTenants reads TenantScript's answer, vals, into r.Tenants (the
// calls of no tenant first, as a use tagged "", when there are any) and
// r.LightPeak.
func parseTenants(r *core.Reply, vals []any) error {
	if len(vals) == 0 {
		return fmt.Errorf("redisstore: tenant scan answered nothing")
	}
	peak, ok := vals[0].(int64)
	if !ok {
		return fmt.Errorf("redisstore: tenant scan answered %v", vals[0])
	}
	if len(vals) < 2 {
		return fmt.Errorf("redisstore: tenant scan answered %v", vals)
	}
	r.LightPeak = int(peak)
	r.Tenants = make([]core.TenantUse, 0, len(vals)/5+1)
	if none, ok := vals[1].(int64); !ok {
		return fmt.Errorf("redisstore: tenant scan answered %v", vals[1])
	} else if none > 0 {
		r.Tenants = append(r.Tenants, core.TenantUse{Units: int(none)})
	}
	if (len(vals)-2)%5 != 0 {
		return fmt.Errorf("redisstore: tenant scan answered %d values", len(vals))
	}
	for i := 2; i+4 < len(vals); i += 5 {
		tag, _ := vals[i].(string)
		n, ok1 := vals[i+1].(int64)
		waited, ok2 := vals[i+2].(int64)
		w, ok3 := core.TagWeight(tag)
		first, ok4 := vals[i+3].(int64)
		last, ok5 := vals[i+4].(int64)
		if len(tag) != tenantTagLen || !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
			return fmt.Errorf("redisstore: tenant scan answered %v", vals[i:i+5])
		}
		r.Tenants = append(r.Tenants, core.TenantUse{Tag: tag, Weight: w, Units: int(n), Waited: int(waited), First: first, Last: last})
	}
	return nil
}

// parseTenantScores reads the capped tenants' answers of readCaps (see
// capsLua), vals, for caps, into r.Caps: each cap's claims refused, and
// its members after its own From, the asking process's (negated in the
// answer) apart, and how many processes hold them. removed says whether
// the script removed the members of the claims refused (see capsDrop).
func parseTenantScores(r *core.Reply, vals []any, caps []core.TenantCap, removed bool) error {
	if len(vals) != len(caps) {
		return fmt.Errorf("redisstore: tenant scores answered %d lists for %d tenants", len(vals), len(caps))
	}
	r.Caps = make([]core.CapRead, len(caps))
	for i, v := range vals {
		list, _ := v.([]any)
		nums := make([]int64, len(list))
		for j, x := range list {
			n, ok := x.(int64)
			if !ok {
				return fmt.Errorf("redisstore: tenant scores answered %v", x)
			}
			nums[j] = n
		}
		if len(nums) < 2 || nums[1] < 0 || len(nums) < 2+int(nums[1]) {
			return fmt.Errorf("redisstore: tenant scores answered %v", nums)
		}
		cr := &r.Caps[i]
		cr.Members.Procs, cr.Members.After = 1+int(nums[0]), caps[i].From
		for _, pos := range nums[2 : 2+nums[1]] {
			if pos < 1 || int(pos) > len(caps[i].Claims) {
				return fmt.Errorf("redisstore: tenant scores refused claim %d of %d", pos, len(caps[i].Claims))
			}
			cr.Refused = append(cr.Refused, int(pos)-1)
		}
		cr.Removed = removed && len(cr.Refused) > 0
		for _, s := range nums[2+nums[1]:] {
			switch {
			case s > caps[i].From:
				cr.Members.Others = append(cr.Members.Others, s)
			case -s > caps[i].From:
				cr.Members.Own = append(cr.Members.Own, -s)
			}
		}
	}
	return nil
}
