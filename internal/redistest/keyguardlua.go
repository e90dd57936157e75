package redistest

import (
	"fmt"
	"sort"
	"strings"
)

// keyArg says which arguments of a command (after its name) are keys.
type keyArg int

const (
	noKey    keyArg = iota // none: TIME, or PUBLISH (a channel is not a key)
	firstKey               // the first
	allKeys                // every one (DEL, EXISTS, UNLINK)
)

// keyPositions are the commands the key guard lets a script call, and
// which of their arguments are keys. A command not listed fails the guard
// as a key not in KEYS does: when a script starts using another command,
// it must be added here with its keys, so that what it touches is checked.
// The list holds the commands the library's scripts use, and GET, SET,
// EXISTS and UNLINK.
var keyPositions = map[string]keyArg{
	"DEL": allKeys, "EXISTS": allKeys, "UNLINK": allKeys,
	"GET": firstKey, "SET": firstKey,
	"HDEL": firstKey, "HGET": firstKey, "HINCRBY": firstKey, "HMGET": firstKey, "HSET": firstKey,
	"PEXPIRE": firstKey, "PTTL": firstKey,
	"ZADD": firstKey, "ZCARD": firstKey, "ZCOUNT": firstKey, "ZMSCORE": firstKey, "ZPOPMIN": firstKey,
	"ZRANGE": firstKey, "ZRANGEBYSCORE": firstKey, "ZREM": firstKey, "ZREMRANGEBYSCORE": firstKey,
	"ZREVRANGEBYSCORE": firstKey, "ZSCORE": firstKey,
	"PUBLISH": noKey, "TIME": noKey,
}

// GuardMark begins every error the key guard raises in a script.
const GuardMark = "KEYGUARD:"

// guardPrelude is the Lua put before a script's first line (on that line,
// so that every line of the script keeps its number in errors): the set
// of KEYS, the table of key positions (%s), and __kg, which every
// redis.call and redis.pcall passes its arguments through, after the
// number of the line it is on. __kg raises an error, before the command
// runs, for a command not in the table or a key argument not in KEYS
// (compared as a string: tostring), naming the line; and otherwise
// returns the command's arguments unchanged, every one.
const guardPrelude = `local __kg_keys, __kg_at = {}, {%s}
for _, k in ipairs(KEYS) do __kg_keys[k] = true end
local function __kg(line, ...)
  local name = ...
  if type(name) ~= 'string' then error('` + GuardMark + ` line ' .. line .. ': a command name must be a string, not ' .. type(name), 0) end
  local cmd = string.upper(name)
  local at = __kg_at[cmd]
  if not at then error('` + GuardMark + ` line ' .. line .. ': ' .. cmd .. ' has no key positions in the key guard\'s table', 0) end
  local last = select('#', ...)
  if at == 0 then last = 1 elseif at == 1 then last = math.min(last, 2) end
  for i = 2, last do
    local k = tostring((select(i, ...)))
    if not __kg_keys[k] then error('` + GuardMark + ` line ' .. line .. ': ' .. cmd .. ' touches key ' .. string.format('%%q', k) .. ', not in KEYS', 0) end
  end
  return ...
end `

// prelude returns guardPrelude on one line, with the table filled in.
func prelude() string {
	names := make([]string, 0, len(keyPositions))
	for name := range keyPositions {
		names = append(names, name)
	}
	sort.Strings(names)
	entries := make([]string, len(names))
	for i, name := range names {
		entries[i] = fmt.Sprintf("%s=%d", name, keyPositions[name])
	}
	return strings.ReplaceAll(fmt.Sprintf(guardPrelude, strings.Join(entries, ", ")), "\n", " ")
}

// guardSource returns src with the guard's prelude and every
// redis.call(args) (or redis.pcall, server.call, server.pcall) on line n
// rewritten as redis.call(__kg(n, args)): the command runs from where it
// ran, with the same arguments, after the guard has checked them. problem
// is not empty when the source reaches Redis some way the rewrite cannot
// guard (a reference to redis.call not called at once, a Lua pcall that
// could swallow the guard's error, a way around the name); the rest is
// guarded all the same.
func guardSource(src string) (guarded, problem string) {
	body, problem := wrapCalls(src)
	head, rest := "", body
	if strings.HasPrefix(body, "#!") { // Redis 7's flags line stays first
		if i := strings.IndexByte(body, '\n'); i >= 0 {
			head, rest = body[:i+1], body[i+1:]
		} else {
			head, rest = body+"\n", ""
		}
	}
	return head + prelude() + rest, problem
}

// luaRewriter copies a Lua source token by token, wrapping the arguments
// of redis.call and redis.pcall; strings and comments are copied whole.
type luaRewriter struct {
	src     string
	i       int
	out     strings.Builder
	parens  []bool // per open parenthesis: whether it opened a guarded call
	prev    string // the last token copied, but for spaces and comments
	line    int    // the line of src[lineAt]
	lineAt  int
	problem string
}

// unguardable are the names that would let a script run a command past
// the rewrite, or catch the guard's error. (A function that takes redis
// itself, as rawget(redis, 'call'), is caught as a use of redis.)
var unguardable = map[string]string{
	"pcall": "a Lua pcall may catch the guard's error", "xpcall": "a Lua xpcall may catch the guard's error",
	"loadstring": "loadstring may build a call the guard does not see", "load": "load may build a call the guard does not see",
	"getfenv": "getfenv reaches redis past the guard", "setfenv": "setfenv reaches redis past the guard",
	"_G": "_G reaches redis past the guard",
}

// wrapCalls rewrites the calls of src (see guardSource).
func wrapCalls(src string) (string, string) {
	r := &luaRewriter{src: src, line: 1}
	for r.i < len(src) {
		r.step()
	}
	if len(r.parens) > 0 {
		r.fail("unbalanced parentheses")
	}
	return r.out.String(), r.problem
}

func (r *luaRewriter) fail(why string) {
	if r.problem == "" {
		r.problem = why
	}
}

// step copies the next token.
func (r *luaRewriter) step() {
	s, i := r.src, r.i
	c := s[i]
	switch {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		r.copy(i+1, false)
	case strings.HasPrefix(s[i:], "--"):
		if n := longBracket(s, i+2); n > 0 {
			r.copy(closeLong(s, i+2, n), false)
		} else if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
			r.copy(i+j, false)
		} else {
			r.copy(len(s), false)
		}
	case c == '\'' || c == '"':
		r.copy(closeQuote(s, i), true)
	case c == '[' && longBracket(s, i) > 0:
		r.copy(closeLong(s, i, longBracket(s, i)), true)
	case isIdentStart(c):
		r.ident()
	case c >= '0' && c <= '9':
		r.copy(numberEnd(s, i), true)
	case c == '.':
		j := i
		for j < len(s) && s[j] == '.' {
			j++
		}
		r.copy(j, true)
	case c == '(':
		r.parens = append(r.parens, false)
		r.copy(i+1, true)
	case c == ')':
		r.closeParen()
	default:
		r.copy(i+1, true)
	}
}

// copy copies the source up to end; token says whether it is one (not
// spaces or a comment).
func (r *luaRewriter) copy(end int, token bool) {
	if token {
		r.prev = r.src[r.i:end]
	}
	r.out.WriteString(r.src[r.i:end])
	r.i = end
}

func (r *luaRewriter) closeParen() {
	guarded := false
	if n := len(r.parens); n > 0 {
		guarded, r.parens = r.parens[n-1], r.parens[:n-1]
	} else {
		r.fail("unbalanced parentheses")
	}
	if guarded {
		r.out.WriteString(")")
	}
	r.copy(r.i+1, true)
}

// ident copies an identifier: redis.call( and redis.pcall( (or server's)
// become guarded calls; another use of redis or server, or an unguardable
// name, is a problem.
func (r *luaRewriter) ident() {
	s, start := r.src, r.i
	end := identEnd(s, start)
	name := s[start:end]
	member := r.prev == "." || r.prev == ":"
	if member {
		r.copy(end, true)
		return
	}
	if why, ok := unguardable[name]; ok {
		r.fail(why)
	}
	if name != "redis" && name != "server" {
		r.copy(end, true)
		return
	}
	j := skipSpace(s, end)
	if j < len(s) && s[j] == '.' && (j+1 >= len(s) || s[j+1] != '.') {
		k := skipSpace(s, j+1)
		fn := s[k:identEnd(s, k)]
		if fn != "call" && fn != "pcall" {
			r.copy(end, true) // redis.error_reply and the like
			return
		}
		if o := skipSpace(s, k+len(fn)); o < len(s) && s[o] == '(' {
			r.out.WriteString(s[start : o+1])
			r.line += strings.Count(s[r.lineAt:start], "\n")
			r.lineAt = start
			fmt.Fprintf(&r.out, "__kg(%d, ", r.line)
			r.i, r.prev = o+1, "("
			r.parens = append(r.parens, true)
			return
		}
	}
	r.fail(name + " used other than as " + name + ".call(...) or " + name + ".pcall(...)")
	r.copy(end, true)
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func identEnd(s string, i int) int {
	for i < len(s) && (isIdentStart(s[i]) || (s[i] >= '0' && s[i] <= '9')) {
		i++
	}
	return i
}

func skipSpace(s string, i int) int {
	for i < len(s) && strings.IndexByte(" \t\r\n", s[i]) >= 0 {
		i++
	}
	return i
}

// numberEnd returns where the number at i ends (1, 0x1F, 1.5e-3).
func numberEnd(s string, i int) int {
	j := i
	for j < len(s) {
		c := s[j]
		exp := j > i && (c == '+' || c == '-') && strings.IndexByte("eEpP", s[j-1]) >= 0
		if !exp && c != '.' && !isIdentStart(c) && (c < '0' || c > '9') {
			break
		}
		j++
	}
	return j
}

// closeQuote returns the end of the quoted string at i.
func closeQuote(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j + 1
		}
	}
	return len(s)
}

// longBracket returns the length of the long bracket opening at i ([[,
// [=[, ...), or 0.
func longBracket(s string, i int) int {
	if i >= len(s) || s[i] != '[' {
		return 0
	}
	j := i + 1
	for j < len(s) && s[j] == '=' {
		j++
	}
	if j < len(s) && s[j] == '[' {
		return j + 1 - i
	}
	return 0
}

// closeLong returns the end of the long string or comment whose bracket,
// n bytes long, opens at i.
func closeLong(s string, i, n int) int {
	end := "]" + strings.Repeat("=", n-2) + "]"
	if j := strings.Index(s[i+n:], end); j >= 0 {
		return i + n + j + len(end)
	}
	return len(s)
}
