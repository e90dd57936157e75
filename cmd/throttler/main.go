// Command throttler shows how much of a shared quota is in use: it reads the
// Redis sorted set that Throttlers share, the way Throttler.Usage does, and
// admits nothing.
//
// Usage:
//
//	throttler status [flags] KEY
//	throttler watch  [flags] KEY
//	throttler help
//
// status prints one block per limit: the calls used in the current window
// out of the limit, how many of them are debt (permits settled above their
// estimate), the calls reserved (waiters holding a future slot), when
// the next slot frees, and the shared pause in force, if any; with
// -inflight, a block with the places in flight taken across every replica.
// watch redraws
// one line per limit every second until interrupted:
//
//	github-api [#########...........] 45/100 reserved 3 next free now  paused -
//
// Flags may come before or after KEY:
//
//	-redis URL      the Redis to read (default $REDIS_URL, else redis://127.0.0.1:6379/0)
//	-limit N        calls per interval, as the Throttlers on KEY use (required)
//	-interval D     the window's length, e.g. 1s or 1h (required)
//	-buffer D       what each call holds beyond the interval (default 50ms)
//	-also KEY:N:D   another limit of the same Throttlers (WithLimit); repeatable
//	-inflight KEY:N status: the places in flight (WithInFlight) taken, of N
//	-every D        watch: time between redraws (default 1s)
//	-count N        watch: stop after N redraws (default 0: until interrupted)
//
// -limit, -interval, -buffer and -also must match what the Throttlers on the
// key were given, since the window is counted with them. The key of -also
// may contain colons (LIMIT and INTERVAL are split off from the right), and
// must share KEY's Redis Cluster {hash tag}.
//
// The exit status is 0 on success, 1 when Redis fails, and 2 for bad usage.
//
// Install it with:
//
//	go install github.com/go-throttler/throttler/cmd/throttler@latest
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	// Failures are reported once, with the exit status; go-redis need not
	// log them too.
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	c := &cli{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, now: time.Now}
	code := c.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
