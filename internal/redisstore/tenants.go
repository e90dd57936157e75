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

// TenantScript counts the members of KEYS[1] scored after ARGV[1]
// (exclusive) by the tenant their suffix names (see TenantSuffix), and
// returns first the most calls of the tenants none of whose calls waited
// (the light tenants) that any window of ARGV[2] µs after ARGV[1] - ARGV[2]
// held, then how many members without a suffix (of no tenant) are scored
// after ARGV[1], then, for each tenant in the order first met, its tag,
// its count and how many of them waited.
var TenantScript = redis.NewScript(`
local from, w = tonumber(ARGV[1]), tonumber(ARGV[2])
local r = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. (from - w), '+inf', 'WITHSCORES')
local n, waited, order, seen, none = {}, {}, {}, {}, 0
for j = 1, #r, 2 do
  local m = r[j]
  if not (#m > 17 and m:sub(-17, -16) == '\0t') then
    if tonumber(r[j + 1]) > from then none = none + 1 end
  else
    local tag, s = m:sub(-14), tonumber(r[j + 1])
    if not n[tag] then
      n[tag], waited[tag] = 0, 0
      order[#order + 1] = tag
    end
    if s > from then n[tag] = n[tag] + 1 end
    if m:sub(-15, -15) == 'w' then waited[tag] = waited[tag] + 1 end
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
end
return out
`)

// TenantScoresScript returns, for each tag of ARGV[2:], the scores of the
// members of KEYS[1] whose suffix names it, scored after ARGV[1]
// (exclusive), ascending.
var TenantScoresScript = redis.NewScript(`
local r = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'WITHSCORES')
local out, at = {}, {}
for i = 2, #ARGV do
  out[i - 1] = {}
  at[ARGV[i]] = i - 1
end
for j = 1, #r, 2 do
  local m = r[j]
  if #m > 17 and m:sub(-17, -16) == '\0t' then
    local k = at[m:sub(-14)]
    if k then
      local o = out[k]
      o[#o + 1] = tonumber(r[j + 1])
    end
  end
end
return out
`)

// TenantPeakScript is PeakScript and TenantScoresScript in one, for the
// first key of an exact round that counts its claims against their peaks
// while it claims for a capped tenant (see core.TenantAsk): it reads the
// members scored after ARGV[4] (exclusive) once, where the two scripts
// would read them twice and PeakScript count each score's windows with
// commands of their own. ARGV[1] is w (µs), ARGV[2] the limit in force,
// ARGV[3] the number of scores c, ARGV[5] the number of tags n, then the
// n tags, the c scores, and the attempt's own members, each with its
// score. ARGV[4] lies at or before every score less w, and before the
// capped tenants' members the round needs. It returns PeakScript's answer
// for the c scores, then, for each tag, the scores of its members after
// ARGV[4], ascending (TenantScoresScript's answer).
var TenantPeakScript = redis.NewScript(`
local w, limit, c, nt = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
local r = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[4], '+inf', 'WITHSCORES')
local at, lists, ours = {}, {}, {}
for i = 1, nt do
  at[ARGV[5 + i]] = i
  lists[i] = {}
end
for i = 6 + nt + c, #ARGV, 2 do ours[ARGV[i]] = true end
local all, others = {}, {}
for j = 1, #r, 2 do
  local m, s = r[j], tonumber(r[j + 1])
  all[#all + 1] = s
  if not ours[m] then others[#others + 1] = s end
  if #m > 17 and m:sub(-17, -16) == '\0t' then
    local k = at[m:sub(-14)]
    if k then
      local l = lists[k]
      l[#l + 1] = s
    end
  end
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
  local count, peak = peakAt(tonumber(ARGV[5 + nt + j]))
  out[#out + 1], out[#out + 2] = count, peak
end
for i = 1, nt do out[#out + 1] = lists[i] end
return out
`)

// tenantCmds are a round trip's reads of the tenants' calls: the scan,
// and the capped tenants' members, read by TenantScoresScript or, with the
// first key's peaks, by TenantPeakScript (peaks).
type tenantCmds struct {
	scan, scores, peaks *redis.Cmd
}

// capsRead reports whether the attempt reads capped tenants' members.
func (c *attemptCmds) capsRead() bool { return len(c.a.Tenants.Caps) > 0 }

// tenantPeakCmd queues TenantPeakScript on key, the first, whose window
// (widened by the attempt's margin) is w and whose limit in force is
// limit: PeakScript's counts and peaks for the attempt's scores, and the
// capped tenants' members.
func (c *attemptCmds) tenantPeakCmd(p redis.Pipeliner, key string, w int64, limit int) *redis.Cmd {
	a := c.a
	from, args := capsArgs(a.Tenants.Caps, 5, len(a.Checks)+2*len(a.Adds))
	for _, g := range a.Checks {
		from = min(from, g-w)
		args = append(args, itoa(g))
	}
	for _, e := range a.Adds {
		args = append(args, e.Member, itoa(e.Score))
	}
	args[0], args[1], args[2], args[3], args[4] = w, limit, len(a.Checks), itoa(from), len(a.Tenants.Caps)
	c.tenants.peaks = TenantPeakScript.Eval(c.ctx, p, []string{key}, args...)
	return c.tenants.peaks
}

// queueTenants queues the scan of the tenants' calls and the reads of the
// capped tenants' members, when the attempt asks for them: after its
// claims are added, so that both count them.
func (c *attemptCmds) queueTenants(p redis.Pipeliner) {
	ask, key := c.a.Tenants, []string{c.s.wins[0].Key}
	if ask.Scan {
		c.tenants.scan = TenantScript.Eval(c.ctx, p, key, ask.From, ask.W)
	}
	// Unless the first key's peaks read them (see tenantPeakCmd: its
	// window's reads are queued before this).
	if c.capsRead() && c.tenants.peaks == nil {
		from, args := capsArgs(ask.Caps, 1, 0)
		args[0] = from
		c.tenants.scores = TenantScoresScript.Eval(c.ctx, p, key, args...)
	}
}

// capsArgs returns the earliest From of caps, and a script's arguments:
// head slots to fill, then each cap's tag, with room for more after.
func capsArgs(caps []core.TenantCap, head, more int) (from int64, args []any) {
	from = caps[0].From
	args = make([]any, head, head+len(caps)+more)
	for _, cp := range caps {
		from = min(from, cp.From)
		args = append(args, cp.Tag)
	}
	return from, args
}

// tenantLists is how many lists the answer of window wi's peak script
// holds after its counts and peaks: one per capped tenant when it is
// TenantPeakScript's.
func (c *attemptCmds) tenantLists(wi int) int {
	if wi == 0 && c.tenants.peaks != nil {
		return len(c.a.Tenants.Caps)
	}
	return 0
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
		return parseTenantScores(r, vals, c.a.Tenants.Caps)
	case c.tenants.peaks != nil:
		vals, err := c.tenants.peaks.Slice()
		if err != nil {
			return err
		}
		return parseTenantScores(r, vals[min(len(vals), 2*len(c.a.Checks)):], c.a.Tenants.Caps)
	}
	return nil
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
	r.Tenants = make([]core.TenantUse, 0, len(vals)/3+1)
	if none, ok := vals[1].(int64); !ok {
		return fmt.Errorf("redisstore: tenant scan answered %v", vals[1])
	} else if none > 0 {
		r.Tenants = append(r.Tenants, core.TenantUse{Units: int(none)})
	}
	for i := 2; i+2 < len(vals); i += 3 {
		tag, _ := vals[i].(string)
		n, ok1 := vals[i+1].(int64)
		waited, ok2 := vals[i+2].(int64)
		w, ok3 := core.TagWeight(tag)
		if len(tag) != tenantTagLen || !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("redisstore: tenant scan answered %q, %v, %v", vals[i], vals[i+1], vals[i+2])
		}
		r.Tenants = append(r.Tenants, core.TenantUse{Tag: tag, Weight: w, Units: int(n), Waited: int(waited)})
	}
	return nil
}

// parseTenantScores reads TenantScoresScript's answer, vals, for caps,
// into r.CapsScores: each cap's scores after its own From.
func parseTenantScores(r *core.Reply, vals []any, caps []core.TenantCap) error {
	if len(vals) != len(caps) {
		return fmt.Errorf("redisstore: tenant scores answered %d lists for %d tenants", len(vals), len(caps))
	}
	r.CapsScores = make([][]int64, len(caps))
	for i, v := range vals {
		list, _ := v.([]any)
		for _, x := range list {
			s, ok := x.(int64)
			if !ok {
				return fmt.Errorf("redisstore: tenant scores answered %v", x)
			}
			if s > caps[i].From {
				r.CapsScores[i] = append(r.CapsScores[i], s)
			}
		}
	}
	return nil
}
