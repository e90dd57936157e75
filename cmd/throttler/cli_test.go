package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/redistest"
)

func noEnv(string) string { return "" }

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want config
		url  string // the Addr of the Redis options
	}{
		{
			name: "flags before KEY",
			args: []string{"-limit", "10", "-interval", "1s", "github-api"},
			want: config{key: "github-api", limit: 10, interval: time.Second, buffer: defaultBuffer},
			url:  "127.0.0.1:6379",
		},
		{
			name: "flags after KEY",
			args: []string{"github-api", "-limit", "10", "-interval=1s", "-buffer", "0s", "-redis", "redis://redis.internal:6380/2"},
			want: config{key: "github-api", limit: 10, interval: time.Second},
			url:  "redis.internal:6380",
		},
		{
			name: "flags around KEY, -also repeated, key with colons",
			args: []string{"-limit", "10", "{gh}:burst", "-also", "{gh}:hourly:5000:1h", "-interval", "1s", "-also", "{gh}:a:b:7:1m"},
			want: config{key: "{gh}:burst", limit: 10, interval: time.Second, buffer: defaultBuffer, also: []limitSpec{
				{key: "{gh}:hourly", limit: 5000, interval: time.Hour},
				{key: "{gh}:a:b", limit: 7, interval: time.Minute},
			}},
			url: "127.0.0.1:6379",
		},
		{
			name: "-- before a KEY that looks like a flag",
			args: []string{"-limit", "1", "-interval", "1s", "--", "-odd-key"},
			want: config{key: "-odd-key", limit: 1, interval: time.Second, buffer: defaultBuffer},
			url:  "127.0.0.1:6379",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseArgs("status", tc.args, noEnv)
			if err != nil {
				t.Fatal(err)
			}
			if got.redis.Addr != tc.url {
				t.Errorf("Redis at %q, want %q", got.redis.Addr, tc.url)
			}
			got.redis = nil
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestParseArgsWatch(t *testing.T) {
	got, err := parseArgs("watch", []string{"k", "-count", "3", "-limit", "1", "-interval", "1h"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got.count != 3 || got.every != time.Second || got.key != "k" {
		t.Errorf("got %+v", *got)
	}
}

func TestParseArgsRedisURLFromEnv(t *testing.T) {
	env := func(name string) string {
		if name == "REDIS_URL" {
			return "redis://:secret@cache:7000/3"
		}
		return ""
	}
	got, err := parseArgs("status", []string{"k", "-limit", "1", "-interval", "1s"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if got.redis.Addr != "cache:7000" || got.redis.DB != 3 || got.redis.Password != "secret" {
		t.Errorf("options %+v", got.redis)
	}
	// -redis wins over the environment.
	got, err = parseArgs("status", []string{"k", "-limit", "1", "-interval", "1s", "-redis", "redis://other:1"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if got.redis.Addr != "other:1" {
		t.Errorf("Redis at %q, want other:1", got.redis.Addr)
	}
}

func TestParseArgsErrors(t *testing.T) {
	if _, err := parseArgs("status", []string{"k", "-h"}, noEnv); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	for _, args := range [][]string{
		{},
		{"-limit", "1", "-interval", "1s"},
		{"k", "-limit", "1"},
		{"k", "-interval", "1s"},
		{"k", "-limit", "-3", "-interval", "1s"},
		{"k", "-limit", "1", "-interval", "-1s"},
		{"k", "-limit", "1", "-interval", "1s", "-also", "x:0:1s"},
		{"k", "-limit", "1", "-interval", "1s", "-also", ":1:1s"},
		{"k", "-limit", "1", "-interval", "1s", "-also", "x:1:0s"},
		{"k", "-limit", "1", "-interval", "1s", "-redis", "://"},
		{"k", "-limit", "1", "-interval", "1s", "-every", "1s"}, // watch only
		{"k", "j", "-limit", "1", "-interval", "1s"},
		{"", "-limit", "1", "-interval", "1s"},
	} {
		_, err := parseArgs("status", args, noEnv)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

func TestParseLimitSpec(t *testing.T) {
	got, err := parseLimitSpec("{a:b}:c:10:1h30m")
	if err != nil {
		t.Fatal(err)
	}
	if want := (limitSpec{key: "{a:b}:c", limit: 10, interval: 90 * time.Minute}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, s := range []string{"", "k", "k:1", "1:1s", "k:x:1s", "k:1:x", "k:1:1"} {
		if _, err := parseLimitSpec(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

func TestWriteStatus(t *testing.T) {
	now := time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)
	us := []throttler.Usage{{
		Key: "{gh}:burst", Limit: 50, Interval: time.Second, Used: 45, Debt: 5, Reserved: 3,
		NextFree:    now.Add(30 * time.Second),
		PausedUntil: now.Add(30 * time.Second),
	}, {
		Key: "{gh}:hourly", Limit: 5000, Interval: time.Hour, Used: 1200,
		NextFree: now.Add(-time.Microsecond), Bucket: 3515625 * time.Microsecond,
	}}
	var b bytes.Buffer
	writeStatus(&b, us, []int{100, 5000}, 50*time.Millisecond, now)
	want := `{gh}:burst
  used       45/50 in the last 1s (+50ms buffer), limit lowered from 100
  debt       5 of the used (settled above their estimate)
  reserved   3
  next free  in 30s (2025-01-02 15:04:35.000 UTC)
  paused     until 2025-01-02 15:04:35.000 UTC (30s left)

{gh}:hourly
  used       1200/5000 in the last 1h0m0s (+50ms buffer)
  debt       0 of the used (settled above their estimate)
  reserved   0
  compacted  older calls counted per bucket of 3.5s
  next free  now (2025-01-02 15:04:04.999 UTC)
  paused     no
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestBarLine(t *testing.T) {
	now := time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		u    throttler.Usage
		want string
	}{
		{
			throttler.Usage{Key: "github-api", Limit: 100, Used: 45, Reserved: 3, NextFree: now},
			"github-api [#########...........] 45/100 reserved 3 next free now  paused -",
		},
		{
			throttler.Usage{Key: "k", Limit: 10, Used: 12, NextFree: now.Add(230 * time.Millisecond)},
			"k [####################] 12/10 reserved 0 next free in 230ms  paused -",
		},
		{
			throttler.Usage{Key: "k", Limit: 3, Used: 1, NextFree: now.Add(90 * time.Second), PausedUntil: now.Add(90 * time.Second)},
			"k [#######.............] 1/3 reserved 0 next free in 1m30s  paused for 1m30s",
		},
		{
			throttler.Usage{Key: "k", Limit: 3, NextFree: now, PausedUntil: now.Add(-time.Second)},
			"k [....................] 0/3 reserved 0 next free now  paused -",
		},
	} {
		if got := barLine(tc.u, now); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}

func TestScreen(t *testing.T) {
	var b bytes.Buffer
	s := screen{w: &b}
	s.draw([]string{"long line"})
	s.draw([]string{"short"})
	s.end()
	if want := "\rlong line\rshort    \n"; b.String() != want {
		t.Errorf("one line: %q, want %q", b.String(), want)
	}
	b.Reset()
	s = screen{w: &b}
	s.draw([]string{"a1", "b1"})
	s.draw([]string{"a", "b2"})
	s.end()
	if want := "\ra1\n\rb1\x1b[1A\ra \n\rb2\n"; b.String() != want {
		t.Errorf("two lines: %q, want %q", b.String(), want)
	}
}

// newCLI returns a cli writing to buffers.
func newCLI(env func(string) string) (*cli, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return &cli{stdout: &stdout, stderr: &stderr, getenv: env, now: time.Now}, &stdout, &stderr
}

func TestRunExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, exitUsage},
		{[]string{"help"}, exitOK},
		{[]string{"status", "-h"}, exitOK},
		{[]string{"nope"}, exitUsage},
		{[]string{"status", "k", "-limit", "1"}, exitUsage},
		{[]string{"status", "k", "-limit", "1", "-interval", "1s", "-also", "j:1:1s"}, exitUsage}, // not in k's slot
	} {
		c, _, stderr := newCLI(noEnv)
		if code := c.run(context.Background(), tc.args); code != tc.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.args, code, tc.code, stderr)
		}
	}
}

func TestRunInProcess(t *testing.T) {
	srv := redistest.Start(t)
	key := redistest.Key(t, "api")
	th, err := throttler.New(srv.NewClient(), key, 4, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	admit(t, th, 3)
	env := func(name string) string {
		if name == "REDIS_URL" {
			return redisURL(srv)
		}
		return ""
	}

	c, stdout, stderr := newCLI(env)
	if code := c.run(context.Background(), []string{"status", key, "-limit", "4", "-interval", "1m"}); code != 0 {
		t.Fatalf("status: exit %d, stderr %q", code, stderr)
	}
	if want := "used       3/4 in the last 1m0s"; !strings.Contains(stdout.String(), want) {
		t.Errorf("status: %q does not contain %q", stdout, want)
	}

	// A watch ends without error when its context is canceled, as by
	// SIGINT.
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(300*time.Millisecond, cancel).Stop()
	c, stdout, stderr = newCLI(env)
	if code := c.run(ctx, []string{"watch", key, "-limit", "4", "-interval", "1m", "-every", "50ms"}); code != 0 {
		t.Fatalf("watch: exit %d, stderr %q", code, stderr)
	}
	if n := strings.Count(stdout.String(), "\r"+key+" [###############.....] 3/4 "); n < 2 {
		t.Errorf("watch: %d redraws, want several: %q", n, stdout)
	}
}

// The help lists every flag each command accepts.
func TestUsageListsEveryFlag(t *testing.T) {
	for _, cmd := range []string{"status", "watch"} {
		var redisURL, inflight string
		var also alsoFlag
		newFlags(cmd, &config{}, &redisURL, &also, &inflight).VisitAll(func(f *flag.Flag) {
			if !strings.Contains(usageText, "\n  -"+f.Name+" ") {
				t.Errorf("%s accepts -%s, which the help does not list", cmd, f.Name)
			}
		})
	}
}
