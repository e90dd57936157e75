package redistest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// KeyGuard is a go-redis hook (add it with AddHook) that holds every Lua
// script a client sends to the rule of Dragonfly, and of some Redis
// Cluster proxies: a script touches no key it was not given in KEYS.
//
// Each EVAL goes as an EVAL of a guarded copy of its script, and each
// EVALSHA of a script the guard knows as an EVALSHA of that copy, alone,
// in a pipeline or in a transaction. The server holds the copy once an
// EVAL of the script has gone through a guarded client (the library sends
// a script's text before its digest), so a server that lost its scripts
// answers NOSCRIPT as it would have. SCRIPT LOAD loads the copy and
// answers the script's own digest; SCRIPT EXISTS asks after the copies.
// The command's arguments are put back once it has run.
//
// The copy (see guardSource) checks every command before it runs: one not
// in the guard's table of key positions, or a key argument not in KEYS,
// fails the script with an error that begins with GuardMark. Otherwise the
// copy does what the script does: the same commands with the same
// arguments, the same reply, the same errors at the same line numbers
// (but for the digest a server names in a script's error: the copy's).
//
// The guard records, by the script's name, every run that answered
// without an error (Ran) and every violation (Violations): the guard's
// errors, an EVALSHA of a digest it does not know (sent unchanged: the
// script runs unguarded, if the server has it), a script whose text the
// rewrite cannot wholly guard, and functions (FCALL, FUNCTION), which it
// does not guard. It is safe for concurrent use by any number of clients.
type KeyGuard struct {
	mu     sync.Mutex
	bySHA  map[string]*guardedScript // by the SHA-1 of the script as sent
	ran    map[string]int            // by name
	faults map[[2]string]int         // by name and problem
}

// guardedScript is one script and its guarded copy.
type guardedScript struct {
	name    string // as given to NewKeyGuard, or the script's SHA-1
	sha     string // the script's SHA-1
	src     string // the copy
	copySHA string // the copy's SHA-1
	problem string // what the copy cannot guard (see guardSource), or ""
}

// Violation is one way a script broke the guard's rule, and how often.
type Violation struct {
	Script  string // the name given to NewKeyGuard, or the script's SHA-1
	Problem string // the guard's error (from GuardMark, less what the server adds), or what it could not guard
	N       int    // how many times
}

// NewKeyGuard returns a guard that knows scripts by name: their EVALSHAs
// are guarded, and their runs recorded under those names. A script sent
// by EVAL is guarded whether it was given or not (one not given is named
// by its SHA-1), and its EVALSHAs are known from then on.
func NewKeyGuard(scripts map[string]*redis.Script) *KeyGuard {
	g := &KeyGuard{bySHA: map[string]*guardedScript{}, ran: map[string]int{}, faults: map[[2]string]int{}}
	for name, s := range scripts {
		g.learn(name, sourceOf(s))
	}
	return g
}

// learn returns the guarded copy of src, made on first sight and named
// name (its SHA-1 when name is empty).
func (g *KeyGuard) learn(name, src string) *guardedScript {
	sha := sha1Hex(src)
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.bySHA[sha]; ok {
		return s
	}
	if name == "" {
		name = sha
	}
	s := &guardedScript{name: name, sha: sha}
	s.src, s.problem = guardSource(src)
	s.copySHA = sha1Hex(s.src)
	g.bySHA[sha] = s
	return s
}

func (g *KeyGuard) known(sha string) *guardedScript {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.bySHA[strings.ToLower(sha)]
}

func (g *KeyGuard) violate(script, problem string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.faults[[2]string{script, problem}]++
}

// Violations returns every violation recorded, by script and problem.
func (g *KeyGuard) Violations() []Violation {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Violation, 0, len(g.faults))
	for k, n := range g.faults {
		out = append(out, Violation{Script: k[0], Problem: k[1], N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Script != out[j].Script {
			return out[i].Script < out[j].Script
		}
		return out[i].Problem < out[j].Problem
	})
	return out
}

// Ran returns, per script name, how many of its runs under the guard
// answered without an error (a nil reply counts).
func (g *KeyGuard) Ran() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]int, len(g.ran))
	for name, n := range g.ran {
		out[name] = n
	}
	return out
}

// Err returns nil when no violation was recorded, and otherwise an error
// that lists them.
func (g *KeyGuard) Err() error {
	vs := g.Violations()
	if len(vs) == 0 {
		return nil
	}
	lines := make([]string, len(vs))
	for i, v := range vs {
		lines[i] = fmt.Sprintf("%s (%d times): %s", v.Script, v.N, v.Problem)
	}
	return errors.New("key guard: " + strings.Join(lines, "; "))
}

// DialHook dials as the client would.
func (g *KeyGuard) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook guards a command sent alone.
func (g *KeyGuard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		after := g.before(cmd)
		err := next(ctx, cmd)
		after(err) // the client sets cmd's error from it after the hooks
		return err
	}
}

// ProcessPipelineHook guards the commands of a pipeline or a transaction.
func (g *KeyGuard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		afters := make([]func(error), len(cmds))
		for i, cmd := range cmds {
			afters[i] = g.before(cmd)
		}
		err := next(ctx, cmds)
		for _, after := range afters {
			after(nil) // each command holds its own error
		}
		return err
	}
}

func nothing(error) {}

// before rewrites cmd when it runs or loads a script, and returns what
// puts its arguments back and records its outcome once it has run (given
// the error the client returned, when cmd holds none yet).
func (g *KeyGuard) before(cmd redis.Cmder) func(error) {
	args := cmd.Args()
	if len(args) < 2 {
		return nothing
	}
	switch name := cmd.Name(); name {
	case "eval", "eval_ro":
		s := g.learn("", fmt.Sprint(args[1]))
		return g.swap(cmd, 1, s.src, s)
	case "evalsha", "evalsha_ro":
		sha := fmt.Sprint(args[1])
		s := g.known(sha)
		if s == nil {
			g.violate(strings.ToLower(sha), strings.ToUpper(name)+" of a script the guard was not given: sent unguarded")
			return nothing
		}
		return g.swap(cmd, 1, s.copySHA, s)
	case "script":
		return g.scriptCmd(cmd)
	case "fcall", "fcall_ro", "function":
		g.violate(strings.ToUpper(name), "functions are not guarded")
	}
	return nothing
}

// swap puts arg in place of cmd's argument i for s's run, then records
// how it went.
func (g *KeyGuard) swap(cmd redis.Cmder, i int, arg string, s *guardedScript) func(error) {
	if s.problem != "" {
		g.violate(s.name, "not wholly guarded: "+s.problem)
	}
	args := cmd.Args()
	was := args[i]
	args[i] = arg
	return func(err error) {
		args[i] = was
		if cmd.Err() != nil {
			err = cmd.Err()
		}
		g.settle(s, err)
	}
}

// settle records how a run of s went.
func (g *KeyGuard) settle(s *guardedScript, err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		if msg := err.Error(); strings.Contains(msg, GuardMark) {
			g.violate(s.name, guardError(msg))
		}
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ran[s.name]++
}

// guardError returns the guard's own words in a script's error: from
// GuardMark to what the server adds (Redis 7 the script's digest and a
// line, miniredis a traceback).
func guardError(msg string) string {
	msg = msg[strings.Index(msg, GuardMark):]
	for _, tail := range []string{" script: ", " stack traceback:"} {
		if i := strings.Index(msg, tail); i >= 0 {
			msg = msg[:i]
		}
	}
	return msg
}

// scriptCmd rewrites SCRIPT LOAD to load the guarded copy (answering the
// script's own digest), and SCRIPT EXISTS to ask after the copies.
func (g *KeyGuard) scriptCmd(cmd redis.Cmder) func(error) {
	args := cmd.Args()
	was := append([]any(nil), args...)
	restore := func(error) { copy(args, was) }
	switch strings.ToLower(fmt.Sprint(args[1])) {
	case "load":
		if len(args) < 3 {
			return nothing
		}
		s := g.learn("", fmt.Sprint(args[2]))
		args[2] = s.src
		return func(err error) {
			restore(err)
			if sc, ok := cmd.(*redis.StringCmd); ok && err == nil && sc.Err() == nil {
				sc.SetVal(s.sha)
			}
		}
	case "exists":
		for i := 2; i < len(args); i++ {
			if s := g.known(fmt.Sprint(args[i])); s != nil {
				args[i] = s.copySHA
			}
		}
		return restore
	}
	return nothing
}

// sourceOf returns the text of s: go-redis hands it to the Scripter's
// Eval, and to nothing else that is public.
func sourceOf(s *redis.Script) string {
	var c sourceCatcher
	s.Eval(context.Background(), &c, nil)
	return c.src
}

// sourceCatcher is a redis.Scripter that sends nothing: Eval keeps the
// script's text.
type sourceCatcher struct{ src string }

func (c *sourceCatcher) Eval(ctx context.Context, script string, _ []string, _ ...any) *redis.Cmd {
	c.src = script
	return redis.NewCmd(ctx)
}

func (c *sourceCatcher) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmd(ctx)
}

func (c *sourceCatcher) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmd(ctx)
}

func (c *sourceCatcher) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmd(ctx)
}

func (c *sourceCatcher) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceCmd(ctx)
}

func (c *sourceCatcher) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringCmd(ctx)
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}
