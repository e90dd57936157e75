package redistest_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/go-throttler/throttler/internal/redistest"
)

// eachServer runs f against miniredis and against a redis-server, with a
// client for each: guarded, and plain.
func eachServer(t *testing.T, f func(t *testing.T, guarded, plain *redis.Client, g *redistest.KeyGuard, key string)) {
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		run(t, &redis.Options{Addr: mr.Addr()}, "k", f)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		key := srv.Key(t, "k")
		plain := srv.NewClient()
		guarded := srv.NewClient()
		g := redistest.NewKeyGuard(cleanScripts)
		guarded.AddHook(g)
		f(t, guarded, plain, g, key)
	})
}

func run(t *testing.T, o *redis.Options, key string, f func(t *testing.T, guarded, plain *redis.Client, g *redistest.KeyGuard, key string)) {
	plain, guarded := redis.NewClient(o), redis.NewClient(o)
	t.Cleanup(func() { plain.Close(); guarded.Close() })
	g := redistest.NewKeyGuard(cleanScripts)
	guarded.AddHook(g)
	f(t, guarded, plain, g, key)
}

// cleanScripts touch only their KEYS, through every path the rewrite
// must keep as it was: calls in strings and comments, spaces before the
// parenthesis, nested calls, concatenation, varargs, multiple results,
// pcall's error table, a command's error at a line number, a nil reply,
// an error reply, PUBLISH to a channel not a key.
var cleanScripts = map[string]*redis.Script{
	"mixed": redis.NewScript(`
-- redis.call('GET', 'not-a-key') in a comment
local s = "redis.call('GET', 'not-a-key') in a string"
local t = [[redis.call('DEL', 'x')]]
redis.call ('ZADD', KEYS[1], 1, 'a', 2, 'b')
redis.call('PUBLISH', 'some-channel', s)
local members = {}
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do members[#members + 1] = m end
local n = redis.call('ZCARD', KEYS[1]) + redis.call('ZCOUNT', KEYS[1], '-inf', '+inf')
local z = {3, 'c', 4, 'd'}
redis.call('ZADD', KEYS[1], unpack(z))
local e = redis.pcall('HGET', KEYS[1], 'f')
local both = redis.call('DEL', KEYS[2], KEYS[3])
local cat = 'n=' .. redis.call('ZCARD', KEYS[1]) .. ';'
redis.call('ZADD', KEYS[1], redis.call('ZCARD', KEYS[1]), 'e')
local f = function(...) return redis.call('ZRANGE', KEYS[1], ...) end
return {n, #t, members, type(e) == 'table' and e.err or 'no error', both, (redis.call('ZSCORE', KEYS[1], 'd')), cat, f(0, 0, 'WITHSCORES')}
`),
	"nil":   redis.NewScript(`return redis.call('GET', KEYS[1])`),
	"error": redis.NewScript("\nredis.call('SET', KEYS[1], 'v')\n\nreturn redis.call('ZCARD', KEYS[1])\n"),
	"reply": redis.NewScript(`return redis.error_reply('MINE went wrong')`),
}

// digest is a script's digest in a server's error, which names the copy.
var digest = regexp.MustCompile(`[0-9a-f]{40}`)

// A script that keeps to its KEYS answers through the guard what it
// answers without it, by EVAL, EVALSHA, in a pipeline and in a
// transaction, and the guard records its runs and no violation.
func TestKeyGuardKeepsCleanScripts(t *testing.T) {
	eachServer(t, func(t *testing.T, guarded, plain *redis.Client, g *redistest.KeyGuard, key string) {
		keys := []string{key, key + ":2", key + ":3"}
		for _, name := range []string{"mixed", "nil", "error", "reply"} {
			s := cleanScripts[name]
			for _, how := range []string{"eval", "evalsha", "pipeline", "multi"} {
				want := outcome(sendScript(t, plain, s, how, keys))
				got := outcome(sendScript(t, guarded, s, how, keys))
				if got != want {
					t.Errorf("%s by %s: guarded %s, plain %s", name, how, got, want)
				}
			}
		}
		if vs := g.Violations(); len(vs) > 0 {
			t.Fatalf("violations of clean scripts: %v", vs)
		}
		ran := g.Ran()
		if ran["mixed"] != 7 || ran["nil"] != 7 {
			t.Fatalf("runs recorded: %v, want 7 of mixed and of nil (an EVAL, then an EVAL before each of 3 EVALSHAs)", ran)
		}
	})
}

// sendScript runs s on keys how: by EVAL, by EVALSHA (after an EVAL), in
// a pipeline or in a transaction (by EVALSHA, after an EVAL).
func sendScript(t *testing.T, c *redis.Client, s *redis.Script, how string, keys []string) *redis.Cmd {
	t.Helper()
	c.Del(t.Context(), keys...)
	switch how {
	case "eval":
		return s.Eval(t.Context(), c, keys)
	case "evalsha":
		s.Eval(t.Context(), c, keys)
		c.Del(t.Context(), keys...)
		return s.EvalSha(t.Context(), c, keys)
	}
	s.Eval(t.Context(), c, keys)
	c.Del(t.Context(), keys...)
	var cmd *redis.Cmd
	queue := func(p redis.Pipeliner) error {
		p.Ping(t.Context())
		cmd = s.EvalSha(t.Context(), p, keys)
		return nil
	}
	if how == "pipeline" {
		c.Pipelined(t.Context(), queue)
	} else {
		c.TxPipelined(t.Context(), queue)
	}
	return cmd
}

// outcome is a script's reply, or its error, the script's digest left out.
func outcome(cmd *redis.Cmd) string {
	v, err := cmd.Result()
	if err != nil {
		return "error " + digest.ReplaceAllString(err.Error(), "<sha>")
	}
	return fmt.Sprintf("%#v", v)
}

// A script that touches a key not in KEYS, or calls a command the guard
// has no key positions for, or is called by a digest the guard does not
// know, is a violation, named by the script, the command and the key.
func TestKeyGuardCatchesViolations(t *testing.T) {
	eachServer(t, func(t *testing.T, guarded, _ *redis.Client, g *redistest.KeyGuard, key string) {
		bad := map[string]string{
			"undeclared": "local x = 1\nreturn redis.call('GET', KEYS[1] .. ':x')",
			"in-pcall":   `local r = redis.pcall('HGET', 'elsewhere', 'f') return 1`,
			"second-del": `return redis.call('DEL', KEYS[1], 'elsewhere')`,
			"unknown":    `return redis.call('INCR', KEYS[1])`,
		}
		for name, src := range bad {
			s := redis.NewScript(src)
			if err := s.Eval(t.Context(), guarded, []string{key}).Err(); err == nil || !strings.Contains(err.Error(), redistest.GuardMark) {
				t.Errorf("%s: %v, want the guard's error", name, err)
			}
		}
		if err := guarded.EvalSha(t.Context(), strings.Repeat("ab", 20), []string{key}).Err(); err == nil {
			t.Errorf("EVALSHA of a digest no server knows: no error")
		}
		vs := g.Violations()
		want := map[string]string{
			redis.NewScript(bad["undeclared"]).Hash(): `KEYGUARD: line 2: GET touches key "` + key + `:x", not in KEYS`,
			redis.NewScript(bad["in-pcall"]).Hash():   `HGET touches key "elsewhere", not in KEYS`,
			redis.NewScript(bad["second-del"]).Hash(): `DEL touches key "elsewhere", not in KEYS`,
			redis.NewScript(bad["unknown"]).Hash():    `INCR has no key positions in the key guard's table`,
			strings.Repeat("ab", 20):                  `EVALSHA of a script the guard was not given`,
		}
		for _, v := range vs {
			if w, ok := want[v.Script]; ok && strings.Contains(v.Problem, w) {
				delete(want, v.Script)
			}
		}
		if len(want) > 0 {
			t.Fatalf("violations not recorded: %v; recorded: %v", want, vs)
		}
		if g.Err() == nil || len(vs) != len(bad)+1 {
			t.Fatalf("recorded %v (Err %v), want %d violations", vs, g.Err(), len(bad)+1)
		}
		t.Logf("%v", g.Err())
	})
}

// A source that reaches Redis past the rewrite (redis.call kept in a
// variable, a Lua pcall around it) is a violation when it runs, though
// its calls are guarded as far as they can be.
func TestKeyGuardNamesWhatItCannotGuard(t *testing.T) {
	eachServer(t, func(t *testing.T, guarded, _ *redis.Client, g *redistest.KeyGuard, key string) {
		for _, src := range []string{
			`local call = redis.call return call('GET', KEYS[1])`,
			`local ok = pcall(function() return redis.call('GET', 'elsewhere') end) return 1`,
		} {
			redis.NewScript(src).Eval(t.Context(), guarded, []string{key})
		}
		got := fmt.Sprint(g.Violations())
		for _, want := range []string{"not wholly guarded: redis used other than as", "not wholly guarded: a Lua pcall"} {
			if !strings.Contains(got, want) {
				t.Errorf("violations %s, want %q", got, want)
			}
		}
	})
}

// SCRIPT LOAD through the guard answers the script's own digest, by
// which EVALSHA then runs the guarded copy; SCRIPT EXISTS answers for it.
func TestKeyGuardScriptLoad(t *testing.T) {
	eachServer(t, func(t *testing.T, guarded, _ *redis.Client, g *redistest.KeyGuard, key string) {
		s := cleanScripts["nil"]
		sha, err := s.Load(t.Context(), guarded).Result()
		if err != nil || sha != s.Hash() {
			t.Fatalf("SCRIPT LOAD: %q, %v; want %s", sha, err, s.Hash())
		}
		if ok, err := s.Exists(t.Context(), guarded).Result(); err != nil || !ok[0] {
			t.Fatalf("SCRIPT EXISTS: %v, %v", ok, err)
		}
		if err := s.EvalSha(t.Context(), guarded, []string{key}).Err(); err != redis.Nil {
			t.Fatalf("EVALSHA: %v, want redis.Nil", err)
		}
		if n := g.Ran()["nil"]; n != 1 || g.Err() != nil {
			t.Fatalf("runs %d, violations %v", n, g.Err())
		}
	})
}
