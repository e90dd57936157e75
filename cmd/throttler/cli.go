package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-throttler/throttler"
)

// Exit statuses.
const (
	exitOK    = 0
	exitRedis = 1 // Redis failed
	exitUsage = 2 // bad command line
)

const usageText = `Usage:
  throttler status [flags] KEY   print the state of KEY's shared window
  throttler watch  [flags] KEY   redraw it every second until interrupted
  throttler help                 print this help

Flags (before or after KEY):
  -redis URL      the Redis to read (default $REDIS_URL, else redis://127.0.0.1:6379/0)
  -limit N        calls per interval, as the Throttlers on KEY use (required)
  -interval D     the window's length, e.g. 1s or 1h (required)
  -buffer D       what each call holds beyond the interval (default 50ms)
  -also KEY:N:D   another limit of the same Throttlers, e.g. {gh}:hourly:5000:1h;
                  repeatable; the key must share KEY's {hash tag}
  -inflight KEY:N status: the places in flight (WithInFlight) taken, of N,
                  e.g. {gh}:inflight:100; the key must share KEY's {hash tag}
  -every D        watch: time between redraws (default 1s)
  -count N        watch: stop after N redraws (default 0: until interrupted)

Limits, interval, buffer and -also must match what the Throttlers on the key
were given. Nothing is admitted: the window is only read.

Exit status: 0 on success, 1 when Redis fails, 2 for bad usage.
`

// cli is one run of the command, with its outputs and environment
// injectable for tests.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time // the local clock, to say how long until a time
}

// usageError is a bad command line: it exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run runs the command line args (without the program name) and returns the
// exit status.
func (c *cli) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usageText)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(c.stdout, usageText)
		return exitOK
	case "status", "watch":
	default:
		if strings.HasPrefix(name, "-") {
			return c.fail("throttler", usagef("the command (status or watch) comes first, before %s", name))
		}
		return c.fail("throttler", usagef("unknown command %q (want status or watch)", name))
	}
	prog := "throttler " + name
	cfg, err := parseArgs(name, args[1:], c.getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.stdout, usageText)
		return exitOK
	}
	if err != nil {
		return c.fail(prog, err)
	}
	t, closeRedis, err := open(cfg)
	if err != nil {
		return c.fail(prog, err)
	}
	defer closeRedis()
	if name == "watch" {
		err = c.watch(ctx, t, cfg)
	} else {
		err = c.status(ctx, t, cfg)
	}
	return c.fail(prog, err)
}

// fail reports err, if any, on stderr and returns the exit status it calls
// for.
func (c *cli) fail(prog string, err error) int {
	if err == nil {
		return exitOK
	}
	msg := strings.TrimPrefix(err.Error(), "throttler: ")
	var ue *usageError
	if errors.As(err, &ue) || errors.Is(err, throttler.ErrInvalidArgument) {
		fmt.Fprintf(c.stderr, "%s: %s\nRun 'throttler -h' for usage.\n", prog, msg)
		return exitUsage
	}
	fmt.Fprintf(c.stderr, "%s: %s\n", prog, msg)
	return exitRedis
}

// open returns a Throttler reading cfg's keys, and a function closing its
// Redis client. It does no network I/O.
func open(cfg *config) (*throttler.Throttler, func(), error) {
	opts := *cfg.redis
	// Let a slow Redis end the read at the library's timeout.
	opts.ContextTimeoutEnabled = true
	// One attempt, unless the URL asks for more: a Redis that is not there
	// is reported at once, with its own error rather than a timeout.
	if opts.MaxRetries == 0 {
		opts.MaxRetries = -1
	}
	if opts.DialerRetries == 0 {
		opts.DialerRetries = 1
	}
	client := redis.NewClient(&opts)
	topts := []throttler.Option{throttler.WithBuffer(cfg.buffer)}
	for _, l := range cfg.also {
		topts = append(topts, throttler.WithLimit(l.key, l.limit, l.interval))
	}
	if cfg.inflightKey != "" {
		topts = append(topts, throttler.WithInFlight(cfg.inflightKey, cfg.inflightCap, 0))
	}
	t, err := throttler.New(client, cfg.key, cfg.limit, cfg.interval, topts...)
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return t, func() { _ = client.Close() }, nil
}
