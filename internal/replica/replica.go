// Package replica runs replica processes for the throttler's fault-injection
// tests: each one is a separate OS process (the test binary itself, re-executed
// with a configuration in its environment) that shares one Redis key with the
// others, so that a test can kill it with SIGKILL, as an orchestrator or the
// OOM killer would.
//
// The package holds what does not need the throttler's internals: the
// configuration (Config, passed through the environment), the line protocol a
// replica writes on its stdout (one event per line, see the Line functions and
// Parse), and the parent's side of a child process (Start, Proc). The replica's
// own program lives in the throttler's test files, where the throttler's test
// hooks are reachable.
package replica

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ModeEnv is the environment variable that, set to "1", turns the test binary
// into a replica (the test's init function checks it before any test runs).
const ModeEnv = "THROTTLER_REPLICA"

// Config is what one replica process runs.
type Config struct {
	ID           string        // the replica's name, sent as the X-Replica header
	Addr         string        // Redis address, host:port
	Key          string        // the shared key
	Limit        int           // calls per interval
	Interval     time.Duration // the sliding window
	Buffer       time.Duration // WithBuffer
	Skew         time.Duration // the replica's local clock is off by this much (WithClock)
	RedisTimeout time.Duration // WithRedisTimeout; 0 = the library's default
	Goroutines   int           // callers looping Wait then GET
	API          string        // URL of the fake API
	KillMid      int           // > 0: SIGKILL itself at the KillMid-th reply that rejected claims
	RoundTripper bool          // call the API through an http.Client with the Throttler's RoundTripper
	InFlightKey  string        // > "" with InFlight: WithInFlight's key (in Key's cluster slot)
	InFlight     int           // > 0: WithInFlight(InFlightKey, InFlight, LeaseTTL); needs RoundTripper
	LeaseTTL     time.Duration // WithInFlight's ttl; 0 = the library's default
}

const envPrefix = "THROTTLER_REPLICA_"

// Environ returns the environment variables that carry c to a replica,
// ModeEnv=1 included.
func (c Config) Environ() []string {
	kv := map[string]string{
		"ID":            c.ID,
		"ADDR":          c.Addr,
		"KEY":           c.Key,
		"LIMIT":         strconv.Itoa(c.Limit),
		"INTERVAL":      c.Interval.String(),
		"BUFFER":        c.Buffer.String(),
		"SKEW":          c.Skew.String(),
		"REDIS_TIMEOUT": c.RedisTimeout.String(),
		"GOROUTINES":    strconv.Itoa(c.Goroutines),
		"API":           c.API,
		"KILL_MID":      strconv.Itoa(c.KillMid),
		"ROUNDTRIPPER":  strconv.FormatBool(c.RoundTripper),
		"INFLIGHT_KEY":  c.InFlightKey,
		"INFLIGHT":      strconv.Itoa(c.InFlight),
		"LEASE_TTL":     c.LeaseTTL.String(),
	}
	env := []string{ModeEnv + "=1"}
	for k, v := range kv {
		env = append(env, envPrefix+k+"="+v)
	}
	return env
}

// FromEnv reads the Config a parent passed with Environ.
func FromEnv() (Config, error) {
	var c Config
	var errs []error
	get := func(k string) string { return os.Getenv(envPrefix + k) }
	atoi := func(k string) int {
		n, err := strconv.Atoi(get(k))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", envPrefix, k, err))
		}
		return n
	}
	dur := func(k string) time.Duration {
		d, err := time.ParseDuration(get(k))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", envPrefix, k, err))
		}
		return d
	}
	c.ID, c.Addr, c.Key, c.API, c.InFlightKey = get("ID"), get("ADDR"), get("KEY"), get("API"), get("INFLIGHT_KEY")
	c.Limit, c.Goroutines, c.KillMid, c.InFlight = atoi("LIMIT"), atoi("GOROUTINES"), atoi("KILL_MID"), atoi("INFLIGHT")
	c.Interval, c.Buffer, c.Skew, c.RedisTimeout = dur("INTERVAL"), dur("BUFFER"), dur("SKEW"), dur("REDIS_TIMEOUT")
	c.LeaseTTL = dur("LEASE_TTL")
	c.RoundTripper = get("ROUNDTRIPPER") == "true"
	return c, errors.Join(errs...)
}

// Kind is the kind of an event line.
type Kind string

// The events a replica reports, one per line.
const (
	KindStart   Kind = "start"   // start <pid> <member-prefix-hex>: the Throttler is built
	KindAdmit   Kind = "admit"   // admit <score-µs> <member-hex>[,<member-hex>...]: onAdmit
	KindRelease Kind = "release" // release <member-hex>[,...]: onRelease (the call did not go)
	KindWait    Kind = "wait"    // wait ok | wait err <class> <message>: a Wait returned
	KindKillMid Kind = "killmid" // killmid <rejected>: about to SIGKILL itself mid-reservation
	KindSummary Kind = "summary" // summary <started> <returned>: graceful exit
	KindGet     Kind = "get"     // get err <message>: the call to the API failed after admission
)

// Event is one parsed line.
type Event struct {
	Kind    Kind
	Score   int64    // admit
	Members []string // admit, release: raw member bytes
	OK      bool     // wait
	Class   string   // wait err: "redis", "canceled", "deadline" or "other"
	Message string   // wait err, get err
	N       int64    // start: pid; killmid: rejected claims; summary: Waits started
	M       int64    // summary: Waits returned
	Prefix  string   // start: member prefix, raw bytes
}

func hexList(members []string) string {
	h := make([]string, len(members))
	for i, m := range members {
		h[i] = hex.EncodeToString([]byte(m))
	}
	return strings.Join(h, ",")
}

func oneLine(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "\r", " ") }

// StartLine reports a started replica and its members' prefix.
func StartLine(pid int, prefix []byte) []byte {
	return fmt.Appendf(nil, "%s %d %x\n", KindStart, pid, prefix)
}

// AdmitLine reports an admission at score (server µs) with its members.
func AdmitLine(score int64, members []string) []byte {
	return fmt.Appendf(nil, "%s %d %s\n", KindAdmit, score, hexList(members))
}

// ReleaseLine reports admitted members given back.
func ReleaseLine(members []string) []byte {
	return fmt.Appendf(nil, "%s %s\n", KindRelease, hexList(members))
}

// WaitLine reports a Wait that returned: class is "" for nil.
func WaitLine(class, message string) []byte {
	if class == "" {
		return fmt.Appendf(nil, "%s ok\n", KindWait)
	}
	return fmt.Appendf(nil, "%s err %s %s\n", KindWait, class, oneLine(message))
}

// GetLine reports an admitted call whose request failed.
func GetLine(message string) []byte {
	return fmt.Appendf(nil, "%s err %s\n", KindGet, oneLine(message))
}

// KillMidLine reports the self-kill with rejected claims in Redis.
func KillMidLine(rejected int) []byte {
	return fmt.Appendf(nil, "%s %d\n", KindKillMid, rejected)
}

// SummaryLine reports, at a graceful exit, how many Waits started and returned.
func SummaryLine(started, returned int64) []byte {
	return fmt.Appendf(nil, "%s %d %d\n", KindSummary, started, returned)
}

// Parse parses one line (without its newline).
func Parse(line string) (Event, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return Event{}, errors.New("empty line")
	}
	e := Event{Kind: Kind(f[0])}
	bad := func() (Event, error) { return Event{}, fmt.Errorf("malformed %s line %q", f[0], line) }
	members := func(s string) ([]string, error) {
		var out []string
		for _, h := range strings.Split(s, ",") {
			b, err := hex.DecodeString(h)
			if err != nil {
				return nil, err
			}
			out = append(out, string(b))
		}
		return out, nil
	}
	var err error
	switch e.Kind {
	case KindStart:
		if len(f) != 3 {
			return bad()
		}
		var p []byte
		if e.N, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return bad()
		}
		if p, err = hex.DecodeString(f[2]); err != nil {
			return bad()
		}
		e.Prefix = string(p)
	case KindAdmit:
		if len(f) != 3 {
			return bad()
		}
		if e.Score, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return bad()
		}
		if e.Members, err = members(f[2]); err != nil {
			return bad()
		}
	case KindRelease:
		if len(f) != 2 {
			return bad()
		}
		if e.Members, err = members(f[1]); err != nil {
			return bad()
		}
	case KindWait:
		switch {
		case len(f) == 2 && f[1] == "ok":
			e.OK = true
		case len(f) >= 3 && f[1] == "err":
			e.Class = f[2]
			e.Message = strings.Join(f[3:], " ")
		default:
			return bad()
		}
	case KindGet:
		if len(f) < 2 || f[1] != "err" {
			return bad()
		}
		e.Message = strings.Join(f[2:], " ")
	case KindKillMid:
		if len(f) != 2 {
			return bad()
		}
		if e.N, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return bad()
		}
	case KindSummary:
		if len(f) != 3 {
			return bad()
		}
		if e.N, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return bad()
		}
		if e.M, err = strconv.ParseInt(f[2], 10, 64); err != nil {
			return bad()
		}
	default:
		return bad()
	}
	return e, nil
}

// configureCmd adjusts a child's command before it starts (on Linux: the
// child dies with the parent).
var configureCmd = func(*exec.Cmd) {}

// Proc is a running replica process, seen from the parent.
type Proc struct {
	Config Config

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tail
	done   chan struct{} // closed once stdout is drained and the process reaped

	mu      sync.Mutex
	killed  bool // the parent killed it
	lineErr error
}

// Start launches exe (the test binary) as a replica running cfg, with the
// parent's environment plus cfg's. Every line the replica writes on stdout is
// parsed and passed to onEvent, from one goroutine per process, in order; a
// line that does not parse is kept as an error (LineErr). The caller must
// eventually call Kill or Stop, which also waits for that goroutine.
func Start(exe string, cfg Config, onEvent func(*Proc, Event)) (*Proc, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), cfg.Environ()...)
	p := &Proc{Config: cfg, cmd: cmd, stderr: &tail{max: 64 << 10}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	configureCmd(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			e, err := Parse(sc.Text())
			if err != nil {
				p.mu.Lock()
				if p.lineErr == nil {
					p.lineErr = err
				}
				p.mu.Unlock()
				continue
			}
			onEvent(p, e)
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and all its output was handled.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill sends SIGKILL (unless the process has exited already) and waits until
// it is reaped and its output handled.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Killed reports whether the parent killed the process.
func (p *Proc) Killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// Stop asks the replica to finish (closes its stdin) and waits up to timeout
// for it to exit; past that it kills it and returns an error.
func (p *Proc) Stop(timeout time.Duration) error {
	_ = p.stdin.Close()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		p.Kill()
		return fmt.Errorf("replica %s (pid %d) did not exit within %s of its stdin closing", p.Config.ID, p.Pid(), timeout)
	}
}

// ExitCode returns the exit code once Done is closed: -1 when a signal ended
// the process.
func (p *Proc) ExitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// Stderr returns the end of what the process wrote on stderr.
func (p *Proc) Stderr() string { return p.stderr.String() }

// LineErr returns the first stdout line that did not parse, if any.
func (p *Proc) LineErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lineErr
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, b...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
