package redisstore

import "github.com/redis/go-redis/v9"

// TrimScript removes from KEYS[1] the members that no longer count: those
// scored from 0 (the marker and the meta values sit below it) to more than
// ARGV[1] µs (a window and core.TrimSlack) before the server's clock, and
// those more than ARGV[2] µs (core.FutureBound) past it, which no
// Throttler wrote (garbage). It returns how many it removed.
//
// The server's own clock, read as the trim runs: never ahead of the
// server, so a trim never removes a member that still counts, however
// wrong a process's estimate of it (stepped, or hours old in a process
// that made no round trip since); and never behind it, so a member leaves
// as soon as it stops counting, where a trim by the last reading a
// process sampled (up to 250ms old) kept it that much longer.
var TrimScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function f(x) return string.format('%.0f', x) end
local n = redis.call('ZREMRANGEBYSCORE', KEYS[1], '0', '(' .. f(now - tonumber(ARGV[1])))
return n + redis.call('ZREMRANGEBYSCORE', KEYS[1], '(' .. f(now + tonumber(ARGV[2])), '+inf')
`)
