// Package redistest gives tests real redis-server processes on loopback.
//
// Start launches a private redis-server (found on PATH) on a free port of
// 127.0.0.1 for one test and stops it when the test ends; StartCluster does
// the same for a Redis Cluster. The servers keep nothing on disk: a restart
// comes back empty.
//
// When the environment variable REDIS_URL is set, Start wraps that server
// instead of launching one; tests then get their own key names from
// Server.Key, and the fault-injection methods (Pause, Resume, Restart, Kill)
// skip the test because they need a server the test controls.
//
// When no server can be had, the test is skipped, or fails if the
// environment variable THROTTLER_REQUIRE_REDIS is "1" (as it is in CI).
//
// Everything is released by the test's cleanups: first the clients from
// NewClient and NewClusterClient are closed, then the processes are killed
// and reaped (each process has one goroutine waiting for it until then). A
// goroutine-leak check must therefore run after the cleanups, as
// goleak.VerifyTestMain does; a deferred goleak.VerifyNone in the test body
// runs too early. On Linux the servers also die with the test binary, should
// it exit without running its cleanups.
//
// NewKeyGuard returns a go-redis hook that runs every Lua script a client
// sends under a guard that fails the script on a key it did not declare
// in KEYS, as Dragonfly and some Redis Cluster proxies do (see KeyGuard).
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv is the environment variable that, when set to "1", turns
// "no Redis available" from a skip into a test failure.
const RequireEnv = "THROTTLER_REQUIRE_REDIS"

// LongEnv is the environment variable that, when set to "1", runs the long
// tests (see Long): CI sets it; a plain go test leaves them out.
const LongEnv = "THROTTLER_LONG"

// Long skips t, a long test (a fault suite run, a recipe measured over
// compressed minutes), unless THROTTLER_LONG=1: a developer's plain go
// test stays a few minutes long, and CI runs them all.
func Long(t testing.TB) {
	t.Helper()
	if os.Getenv(LongEnv) != "1" {
		t.Skip("a long test: " + LongEnv + "=1 runs it (CI does)")
	}
}

// URLEnv is the environment variable naming an existing Redis server
// (redis://...) that Start wraps instead of launching redis-server.
const URLEnv = "REDIS_URL"

const (
	readyTimeout = 10 * time.Second // how long a started server may take to answer
	startTries   = 5                // attempts when a freshly picked port is taken meanwhile
	logTailBytes = 4096             // how much of the server log goes into a failure message
)

// configureCmd adjusts a server's command before it starts; on Linux it asks
// the kernel to kill the server if the test binary dies without cleaning up.
var configureCmd = func(*exec.Cmd) {}

// Server is one Redis server for one test: either a redis-server process the
// test controls, or the server named by REDIS_URL.
type Server struct {
	t    testing.TB     // the test that owns the server and its clients
	opts *redis.Options // how to reach it; copied for every client

	// The rest is set only for a server the test controls.
	bin     string   // path of redis-server
	dir     string   // --dir, and home of the log file
	logPath string   // stdout and stderr of every run, appended
	extra   []string // extra arguments (cluster mode)

	mu   sync.Mutex
	proc *process // the running process; nil once killed
}

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd.Wait has returned
	err    error         // cmd.Wait's result, valid once exited is closed
}

// Start returns a Redis server for the test t. It launches redis-server on a
// free port of 127.0.0.1, in a fresh temporary directory, and kills it when
// the test ends. If REDIS_URL is set it returns that server instead. If
// neither is available it skips t, or fails t when THROTTLER_REQUIRE_REDIS=1.
func Start(t testing.TB) *Server {
	t.Helper()
	if url := os.Getenv(URLEnv); url != "" {
		return startExternal(t, url)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server not found on PATH and REDIS_URL unset", "install redis-server, or set REDIS_URL")
	}
	return startLocal(t, bin, false)
}

// unavailable skips t because of what is missing, or fails it when
// THROTTLER_REQUIRE_REDIS=1. hint says how to get it.
func unavailable(t testing.TB, missing, hint string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("redistest: %s, and %s=1 forbids skipping real-Redis tests (%s)", missing, RequireEnv, hint)
	}
	t.Skipf("%s: skipping real-Redis test (%s)", missing, hint)
}

// startExternal wraps the server at url after checking that it answers.
func startExternal(t testing.TB, url string) *Server {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("redistest: cannot parse %s: %v", URLEnv, err)
	}
	s := &Server{t: t, opts: opts}
	rdb := redis.NewClient(s.options())
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: the server at %s=%s does not answer PING: %v", URLEnv, url, err)
	}
	return s
}

// startLocal launches redis-server on a free port, retrying with another
// port when the one picked was taken before the server could bind it.
// For cluster nodes (cluster true) the port+10000 of the cluster bus must be
// free too.
func startLocal(t testing.TB, bin string, cluster bool, extra ...string) *Server {
	t.Helper()
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	s.logPath = filepath.Join(s.dir, "redis.log")
	if cluster {
		s.extra = []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		}
	}
	s.extra = append(s.extra, extra...)
	t.Cleanup(s.stop)

	for try := 1; ; try++ {
		port, err := freePort(cluster)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.opts = &redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		err = s.launch()
		if err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) || try == startTries {
			t.Fatalf("redistest: %v\n%s", err, s.logTail())
		}
		t.Logf("redistest: port %d was taken, trying another", port)
		// A cluster node wrote its nodes.conf, port and all, before failing.
		_ = os.Remove(filepath.Join(s.dir, "nodes.conf"))
	}
}

// errPortTaken reports that redis-server could not bind its port.
var errPortTaken = errors.New("port already in use")

// launch starts redis-server on s's address and waits until it answers
// (INFO server, which also proves that it is this process answering).
func (s *Server) launch() error {
	_, port, _ := net.SplitHostPort(s.opts.Addr)
	args := append([]string{
		"--port", port,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--dir", s.dir,
	}, s.extra...)

	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child keeps its own copy
	fmt.Fprintf(logFile, "--- redistest: starting %s on %s\n", s.bin, s.opts.Addr)
	logStart, _ := logFile.Seek(0, io.SeekEnd) // what this run writes comes after

	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile // redis-server logs to stdout by default
	cmd.Stderr = logFile
	configureCmd(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()

	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-p.exited:
			s.mu.Lock()
			s.proc = nil
			s.mu.Unlock()
			if b, _ := os.ReadFile(s.logPath); int64(len(b)) > logStart &&
				strings.Contains(string(b[logStart:]), "Address already in use") {
				return fmt.Errorf("redis-server on %s: %w", s.opts.Addr, errPortTaken)
			}
			return fmt.Errorf("redis-server on %s exited during start-up: %v", s.opts.Addr, p.err)
		default:
		}
		if readyErr := serves(s.opts.Addr, cmd.Process.Pid); readyErr == nil {
			return nil
		} else if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("redis-server on %s not ready within %v: %v", s.opts.Addr, readyTimeout, readyErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the running process, if any, and waits until it has exited.
// SIGKILL ends a paused (SIGSTOPped) process too.
func (s *Server) stop() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Addr returns the server's "host:port", e.g. "127.0.0.1:36379".
func (s *Server) Addr() string { return s.opts.Addr }

// NewClient returns a go-redis client for the server, closed when the test
// that started the server ends. Optional configure functions may adjust the
// options first (for example short timeouts for tests that pause the server).
func (s *Server) NewClient(configure ...func(*redis.Options)) *redis.Client {
	opts := s.options()
	for _, f := range configure {
		f(opts)
	}
	rdb := redis.NewClient(opts)
	s.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// options returns a fresh copy of the options reaching the server.
func (s *Server) options() *redis.Options {
	o := *s.opts
	if s.opts.TLSConfig != nil {
		o.TLSConfig = s.opts.TLSConfig.Clone()
	}
	return &o
}

// Key returns a key name unique to this test and call,
// "test:<TestName>:<name>:<random>", so tests sharing a server never collide.
func (s *Server) Key(t testing.TB, name string) string { return Key(t, name) }

// Key returns a key name unique to the test t and this call:
// "test:<TestName>:<name>:<random>".
func Key(t testing.TB, name string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "test:" + t.Name() + ":" + name + ":" + hex.EncodeToString(b[:])
}

// Pause stops the server process with SIGSTOP: it keeps its connections and
// its port but answers nothing until Resume. It skips t for a server the test
// does not control (REDIS_URL).
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, "Pause", sigStop)
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, "Resume", sigCont)
}

// signal sends sig to the running server process.
func (s *Server) signal(t testing.TB, what string, sig os.Signal) {
	t.Helper()
	s.mustControl(t, what)
	if sig == nil {
		t.Skipf("redistest: %s is not supported on this operating system", what)
	}
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		t.Fatalf("redistest: %s: redis-server on %s is not running", what, s.Addr())
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: %s: cannot signal redis-server on %s: %v", what, s.Addr(), err)
	}
}

// Restart kills the server (SIGKILL) and starts it again on the same port.
// It comes back empty, as nothing is persisted. (A cluster node keeps its
// nodes.conf, hence its identity and slots, but not its data.) Restart also
// starts a server that Kill left dead.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mustControl(t, "Restart")
	s.stop()
	if err := s.launch(); err != nil {
		t.Fatalf("redistest: Restart: %v\n%s", err, s.logTail())
	}
}

// Kill kills the server with SIGKILL and leaves it dead: connections are
// refused until Restart.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mustControl(t, "Kill")
	s.stop()
}

// mustControl skips t unless the test launched the server itself.
func (s *Server) mustControl(t testing.TB, what string) {
	t.Helper()
	if s.bin == "" {
		t.Skipf("redistest: %s needs a redis-server the test controls, not %s: skipping", what, URLEnv)
	}
}

// logTail returns the end of the server log, for failure messages.
func (s *Server) logTail() string {
	if s.logPath == "" {
		return ""
	}
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no redis-server log: %v)", err)
	}
	if len(b) > logTailBytes {
		b = b[len(b)-logTailBytes:]
	}
	return "redis-server log " + s.logPath + " (tail):\n" + string(b)
}

// freePort picks a port of 127.0.0.1 that is free at the moment: the kernel
// chooses it for a listener that is closed at once. With cluster true,
// port+10000 (the cluster bus) must be free as well.
func freePort(cluster bool) (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("cannot find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !cluster {
			l.Close()
			return port, nil
		}
		ok := port+10000 <= 65535
		if ok {
			bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
			ok = err == nil
			if ok {
				bus.Close()
			}
		}
		l.Close()
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("cannot find a free port whose port+10000 is free too")
}

// serves checks that the process pid answers on addr: INFO server must
// answer, with that process_id (and not that of another server which took
// the port meanwhile). It uses no client library, so that nothing lingers.
func serves(addr string, pid int) error {
	info, err := command(addr, "INFO", "server")
	if err != nil {
		return err
	}
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%s is served by process %q, not %d", addr, got, pid)
	}
	return nil
}

// infoField returns the value of "name:value" in the reply of INFO or
// CLUSTER INFO.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// command sends one command over a fresh connection and returns its reply,
// which must be a simple string or a bulk string. An error reply is an error.
func command(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))

	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(req.String())); err != nil {
		return "", err
	}

	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("unexpected reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}
