package redisstore

import (
	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// WideScript publishes a margin: ARGV[1] µs, in force for ARGV[2] µs from
// the server's now, unless a larger one is in force, which it extends. The
// members only grow while in force; one that has ended is replaced. A
// script, so that a margin that ended and a new, smaller one cannot cross
// a larger one published at the same moment. Scores are formatted whole:
// Lua's own conversion keeps 14 digits, and a server time has 16.
var WideScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = redis.call('ZMSCORE', KEYS[1], ARGV[3], ARGV[4])
local x, e = tonumber(ARGV[1]), now + tonumber(ARGV[2])
if s[2] and -tonumber(s[2]) > now then
  x = math.max(x, -tonumber(s[1] or 0))
  e = math.max(e, -tonumber(s[2]))
end
redis.call('ZADD', KEYS[1], string.format('%.0f', -x), ARGV[3], string.format('%.0f', -e), ARGV[4])
return 1
`)

// queueMargin queues the publication of the attempt's own margin, when it
// has one and adds members: before any member is added, so that a round
// that counts after them reads the margin it must count with (see
// internal/core's margin.go).
func (c *attemptCmds) queueMargin(p redis.Pipeliner) {
	if m := c.a.Margin; m.Own > 0 && len(c.a.Adds) > 0 {
		WideScript.Eval(c.ctx, p, []string{c.s.wins[0].Key}, m.Own, m.For, WideMember, WideEndMember)
	}
}

// readMargin reads into r the largest margin published and its end, from
// their members' scores.
func readMargin(r *core.Reply, wide, end float64) {
	r.Wide, r.WideEnd = MetaValue(wide), MetaValue(end)
}
