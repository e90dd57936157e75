// Package redisserver starts a throwaway redis-server on loopback for the
// harness, and reads the INFO figures it reports.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process started by Start.
type Server struct {
	Addr    string // host:port on 127.0.0.1
	Version string // redis_version from INFO
	cmd     *exec.Cmd
	dir     string
	done    chan struct{}
	log     *tail
}

// Available reports whether redis-server is on PATH.
func Available() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Start starts redis-server on a free loopback port, without persistence,
// and returns once it answers PING. Stop it with Stop.
func Start(ctx context.Context) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "throttler-bench-redis-")
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		s, err := start(ctx, bin, dir)
		if err == nil {
			return s, nil
		}
		if attempt == 4 || ctx.Err() != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		// Most likely another process took the port between our probe and
		// redis-server binding it: try another.
	}
}

func start(ctx context.Context, bin, dir string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{}), log: &tail{}}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		// The keys scenario turns active expiry off (DEBUG
		// SET-ACTIVE-EXPIRE) to measure keys made over longer than their
		// TTL; DEBUG is refused otherwise (Redis 7.0 and later).
		"--enable-debug-command", "local",
	)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	configure(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()

	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("redis-server exited at start: %s", s.log.String())
		default:
		}
		if err := rdb.Ping(ctx).Err(); err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.kill()
			return nil, fmt.Errorf("redis-server on %s did not answer PING: %s", s.Addr, s.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		s.Version = ParseInfo(info)["redis_version"]
	}
	return s, nil
}

// Stop terminates the server (SIGTERM, then SIGKILL after 5s) and removes
// its directory. It is safe to call more than once.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.kill()
	}
	os.RemoveAll(s.dir)
}

func (s *Server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ParseInfo parses the text INFO returns into field -> value.
func ParseInfo(info string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// Snapshot is what the harness reads from INFO around a run.
type Snapshot struct {
	Calls   map[string]int64 // commandstats: command -> calls
	CPUUser float64          // used_cpu_user, seconds
	CPUSys  float64          // used_cpu_sys, seconds
}

// Overhead lists the commands that are the harness's or the client's
// bookkeeping, not an implementation's work: they are left out of the
// commands-per-admission figure.
func Overhead(cmd string) bool {
	switch cmd {
	case "info", "flushall", "ping", "hello", "select", "auth", "command":
		return true
	}
	return strings.HasPrefix(cmd, "client") || strings.HasPrefix(cmd, "command|")
}

// Take reads INFO commandstats and cpu in one command.
func Take(ctx context.Context, rdb *redis.Client) (Snapshot, error) {
	info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return Snapshot{}, err
	}
	return parseSnapshot(info)
}

func parseSnapshot(info string) (Snapshot, error) {
	m := ParseInfo(info)
	s := Snapshot{Calls: map[string]int64{}}
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if n, ok := strings.CutPrefix(f, "calls="); ok {
				c, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					return s, fmt.Errorf("INFO commandstats %s: %w", k, err)
				}
				s.Calls[name] = c
			}
		}
	}
	var err1, err2 error
	s.CPUUser, err1 = strconv.ParseFloat(m["used_cpu_user"], 64)
	s.CPUSys, err2 = strconv.ParseFloat(m["used_cpu_sys"], 64)
	if err := errors.Join(err1, err2); err != nil {
		return s, fmt.Errorf("INFO cpu: %w", err)
	}
	return s, nil
}

// Delta returns, from before to after, the commands an implementation ran
// (overhead left out), per command and in total, and the CPU Redis used.
func Delta(before, after Snapshot) (perCmd map[string]int64, total int64, cpu time.Duration) {
	perCmd = map[string]int64{}
	for name, n := range after.Calls {
		if Overhead(name) {
			continue
		}
		if d := n - before.Calls[name]; d > 0 {
			perCmd[name] = d
			total += d
		}
	}
	secs := (after.CPUUser + after.CPUSys) - (before.CPUUser + before.CPUSys)
	return perCmd, total, time.Duration(secs * float64(time.Second))
}

// tail keeps the last few KB written to it: the server's log, for errors.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

var _ io.Writer = (*tail)(nil)

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 4096; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
