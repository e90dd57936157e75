package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/redistest"
)

// binDir holds the binary built for the tests that run the command.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "throttler-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

var build struct {
	once sync.Once
	path string
	err  error
}

// binary builds the command once, for every test that runs it.
func binary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		path := filepath.Join(binDir, "throttler")
		if runtime.GOOS == "windows" {
			path += ".exe"
		}
		out, err := exec.Command(goTool, "build", "-o", path, ".").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		build.path = path
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// result is what one run of the command did.
type result struct {
	stdout, stderr string
	code           int
}

// runCmd runs the command with args and waits for it to exit.
func runCmd(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("throttler %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("$ throttler %s  (exit %d)\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// redisURL returns the URL of srv for the -redis flag.
func redisURL(srv *redistest.Server) string {
	if u := os.Getenv(redistest.URLEnv); u != "" {
		return u // redistest wraps that server
	}
	return "redis://" + srv.Addr() + "/0"
}

// closedPort returns an address of 127.0.0.1 where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// keys returns a key for the test and a second one in the same Redis
// Cluster slot, for -also.
func keys(t *testing.T) (key, other string) {
	key = "{" + redistest.Key(t, "api") + "}"
	return key, key + ":hourly"
}

// admit makes th admit n calls, and waits until Usage counts them all as
// used: a call's score, set from the Throttler's estimate of the server's
// clock, may lead the server's TIME by a millisecond or two, and Usage
// counts it as reserved until then.
func admit(t *testing.T, th *throttler.Throttler, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		r, err := th.Allow(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed {
			t.Fatalf("call %d not admitted: %+v", i+1, r)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		us, err := th.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if us[0].Used >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls admitted, Usage still says %+v", n, us[0])
		}
		time.Sleep(time.Millisecond)
	}
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

func TestStatus(t *testing.T) {
	srv := redistest.Start(t)
	key, hourly := keys(t)
	th, err := throttler.New(srv.NewClient(), key, 10, time.Minute,
		throttler.WithLimit(hourly, 100, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	admit(t, th, 7)
	pause := time.Now().Add(30 * time.Second)
	if err := th.PauseUntil(context.Background(), pause); err != nil {
		t.Fatal(err)
	}

	// Flags before and after KEY.
	r := runCmd(t, "status", "-redis", redisURL(srv), "-limit", "10", key,
		"-interval", "1m", "-also", hourly+":100:1h")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	blocks := strings.Split(r.stdout, "\n\n")
	if len(blocks) != 2 {
		t.Fatalf("want 2 blocks, got %d:\n%s", len(blocks), r.stdout)
	}
	mustContain(t, "first block", blocks[0],
		key+"\n",
		"used       7/10 in the last 1m0s (+50ms buffer)",
		"reserved   0",
		"paused     until "+pause.Format("2006-01-02 15:04:05"))
	// The pause holds every call: about 30s.
	if re := regexp.MustCompile(`next free  in (2\d(\.\d)?|30)s \(.*\)\n(.|\n)*\(((2\d(\.\d)?|30)s) left\)`); !re.MatchString(blocks[0]) {
		t.Errorf("first block does not match %s:\n%s", re, blocks[0])
	}
	mustContain(t, "second block", blocks[1],
		hourly+"\n",
		"used       7/100 in the last 1h0m0s",
		"next free  now",
		"paused     no")
}

func TestStatusReserved(t *testing.T) {
	srv := redistest.Start(t)
	key, _ := keys(t)
	// Two calls per 2s, fill it, and a waiter holding the next slot.
	th, err := throttler.New(srv.NewClient(), key, 2, 2*time.Second,
		throttler.WithReserveAhead(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	admit(t, th, 2)
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { waited <- th.Wait(ctx) }()
	defer func() {
		cancel()
		<-waited
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		us, err := th.Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if us[0].Reserved == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter holds no slot: %+v", us[0])
		}
		time.Sleep(10 * time.Millisecond)
	}

	r := runCmd(t, "status", key, "-redis", redisURL(srv), "-limit", "2", "-interval", "2s")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	mustContain(t, "status", r.stdout, "used       2/2 ", "reserved   1", "next free  in ", "paused     no")
}

func TestWatch(t *testing.T) {
	srv := redistest.Start(t)
	key, hourly := keys(t)
	th, err := throttler.New(srv.NewClient(), key, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	admit(t, th, 7)
	if err := th.PauseUntil(context.Background(), time.Now().Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}

	t.Run("one limit", func(t *testing.T) {
		start := time.Now()
		r := runCmd(t, "watch", key, "-redis", redisURL(srv), "-limit", "10", "-interval", "1m",
			"-count", "2", "-every", "200ms")
		if r.code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
		if el := time.Since(start); el < 200*time.Millisecond {
			t.Errorf("two redraws took %s, less than -every", el)
		}
		frames := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\r")[1:]
		if len(frames) != 2 || !strings.HasPrefix(r.stdout, "\r") || !strings.HasSuffix(r.stdout, "\n") {
			t.Fatalf("want 2 frames, each after \\r, then a newline; got %q", r.stdout)
		}
		for _, f := range frames {
			want := regexp.MustCompile(`^` + regexp.QuoteMeta(key+" [##############......] 7/10 reserved 0 next free in ") +
				`(2\d(\.\d)?|30)s  paused for (2\d(\.\d)?|30)s *$`)
			if !want.MatchString(f) {
				t.Errorf("frame %q does not match %s", f, want)
			}
		}
	})

	t.Run("two limits", func(t *testing.T) {
		r := runCmd(t, "watch", "-redis", redisURL(srv), "-limit", "10", "-interval", "1m",
			"-also", hourly+":100:1h", "-count", "2", "-every", "10ms", key)
		if r.code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
		// The second frame moves the cursor back up over the first.
		if n := strings.Count(r.stdout, "\x1b[1A"); n != 1 {
			t.Errorf("%d cursor moves, want 1: %q", n, r.stdout)
		}
		if n := strings.Count(r.stdout, hourly+" [....................] 0/100 reserved 0 next free now  paused -"); n != 2 {
			t.Errorf("%d lines for %s, want 2: %q", n, hourly, r.stdout)
		}
	})
}

func TestWatchUntilInterrupted(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send on Windows")
	}
	srv := redistest.Start(t)
	key, _ := keys(t)
	cmd := exec.Command(binary(t), "watch", key, "-redis", redisURL(srv), "-limit", "5", "-interval", "1s", "-every", "50ms")
	var out syncBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	frame := "\r" + key + " [....................] 0/5 reserved 0 next free now  paused -"
	for deadline := time.Now().Add(10 * time.Second); strings.Count(out.String(), frame) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("not two redraws within 10s: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("after SIGINT: %v, output %q", waitErr, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s after SIGINT")
	}
	if !strings.HasSuffix(out.String(), "\n") {
		t.Errorf("output does not end its line: %q", out.String())
	}
}

// syncBuffer is a bytes.Buffer that a process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"status", "-h"}, {"watch", "k", "-help"}} {
		r := runCmd(t, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
}

func TestBadInput(t *testing.T) {
	redis := "redis://" + closedPort(t) // never reached
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"stats"}, `unknown command "stats"`},
		{[]string{"-limit", "5", "status"}, "the command (status or watch) comes first"},
		{[]string{"status", "-redis", redis, "-limit", "5", "-interval", "1s"}, "missing KEY"},
		{[]string{"status", "k", "-redis", redis, "-interval", "1s"}, "-limit must be given"},
		{[]string{"status", "k", "-redis", redis, "-limit", "0", "-interval", "1s"}, "-limit must be given, at least 1 (got 0)"},
		{[]string{"status", "k", "-redis", redis, "-limit", "5"}, "-interval must be given"},
		{[]string{"status", "k", "-redis", redis, "-limit", "5", "-interval", "soon"}, `invalid value "soon" for flag -interval`},
		{[]string{"status", "k", "-redis", redis, "-limit", "five", "-interval", "1s"}, `invalid value "five" for flag -limit`},
		{[]string{"status", "k", "-redis", redis, "-limit", "5", "-interval", "1s", "-buffer", "-1s"}, "-buffer must not be negative"},
		{[]string{"status", "k", "-redis", "http://localhost", "-limit", "5", "-interval", "1s"}, "-redis: bad URL"},
		{[]string{"status", "k", "-redis", redis, "-limit", "5", "-interval", "1s", "-also", "k2:5"}, "want KEY:LIMIT:INTERVAL"},
		{[]string{"status", "k", "-redis", redis, "-limit", "5", "-interval", "1s", "-also", "other:5:1h"}, "same {tag}"},
		{[]string{"status", "k", "k2", "-redis", redis, "-limit", "5", "-interval", "1s"}, `unexpected argument "k2"`},
		{[]string{"status", "k", "-redis", redis, "-limit", "5", "-interval", "1s", "-count", "2"}, "flag provided but not defined: -count"},
		{[]string{"watch", "k", "-redis", redis, "-limit", "5", "-interval", "1s", "-every", "0s"}, "-every must be positive"},
	} {
		r := runCmd(t, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%q: exit %d (want 2), stdout %q, stderr %q (want %q)", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
}

func TestRedisDown(t *testing.T) {
	redis := "redis://" + closedPort(t)
	for _, cmd := range []string{"status", "watch"} {
		r := runCmd(t, cmd, "k", "-redis", redis, "-limit", "5", "-interval", "1s")
		if r.code != 1 || !strings.Contains(r.stderr, "redis unavailable") || r.stdout != "" {
			t.Errorf("%s: exit %d (want 1), stderr %q", cmd, r.code, r.stderr)
		}
	}
}

// status shows the debt settled permits added, and the places in flight
// taken across replicas.
func TestStatusDebtAndInFlight(t *testing.T) {
	srv := redistest.Start(t)
	key, _ := keys(t)
	places := key + ":inflight"
	th, err := throttler.New(srv.NewClient(), key, 20, time.Minute, throttler.WithInFlight(places, 5, 0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	settled, err := th.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := settled.Settle(ctx, 5); err != nil { // 3 units of debt
		t.Fatal(err)
	}
	var held []*throttler.Permit
	for range 2 {
		p, err := th.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	defer func() {
		for _, p := range held {
			p.Done()
		}
	}()

	r := runCmd(t, "status", key, "-redis", redisURL(srv), "-limit", "20", "-interval", "1m", "-inflight", places+":5")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	mustContain(t, "status", r.stdout,
		"used       7/20 ",
		"debt       3 of the used",
		places+"\n  in flight  2/5\n")
}
