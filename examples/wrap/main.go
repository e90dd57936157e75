// Command wrap shows the two ways to throttle a call that is not an HTTP
// request through a RoundTripper:
//
//   - throttler.Wrap turns a typed function func(ctx, In) (Out, error) into a
//     throttled function of the same type;
//   - Throttler.Do runs any closure once the shared quota has room.
//
// Both share one quota (3 calls per 500ms) on an embedded miniredis. The
// "third-party call" is a fake user lookup; the output shows each result with
// its elapsed time, three at a time, and that the function's own errors come
// back unchanged.
//
// Usage:
//
//	go run ./examples/wrap
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/go-throttler/throttler"
)

const (
	limit    = 3
	interval = 500 * time.Millisecond
)

// errNotFound is returned by lookupUser for an unknown user.
var errNotFound = errors.New("user not found")

// lookupUser stands in for a call to a third-party API: it returns the
// number of followers of a user.
func lookupUser(ctx context.Context, name string) (int, error) {
	followers := map[string]int{"ada": 1815, "alan": 1912, "grace": 1906, "edsger": 1930, "barbara": 1939}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(5 * time.Millisecond): // network round trip
	}
	n, ok := followers[name]
	if !ok {
		return 0, fmt.Errorf("lookup %q: %w", name, errNotFound)
	}
	return n, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "wrap:", err)
		os.Exit(1)
	}
}

func run() error {
	mr, err := miniredis.Run()
	if err != nil {
		return err
	}
	defer mr.Close()
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rc.Close()

	thr, err := throttler.New(rc, "examples:wrap", limit, interval)
	if err != nil {
		return err
	}
	ctx := context.Background()
	start := time.Now()
	since := func() int64 { return time.Since(start).Milliseconds() }

	// Wrap: same signature as lookupUser, but each call waits for the quota.
	lookup := throttler.Wrap(thr, lookupUser)
	fmt.Printf("throttler.Wrap, %d calls per %v:\n", limit, interval)
	for _, name := range []string{"ada", "alan", "grace", "edsger", "nobody", "barbara"} {
		n, err := lookup(ctx, name)
		switch {
		case errors.Is(err, errNotFound):
			fmt.Printf("  %4dms  %-8s error: %v\n", since(), name, err)
		case err != nil:
			return err
		default:
			fmt.Printf("  %4dms  %-8s %d followers\n", since(), name, n)
		}
	}

	// Do: any closure, here from several goroutines at once.
	fmt.Println("Throttler.Do, 6 goroutines:")
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
		names  = []string{"ada", "alan", "grace", "edsger", "barbara", "ada"}
		totals = make([]int, len(names))
	)
	for i, name := range names {
		wg.Go(func() {
			err := thr.Do(ctx, func(ctx context.Context) error {
				n, err := lookupUser(ctx, name)
				totals[i] = n
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			fmt.Printf("  %4dms  %-8s %d followers\n", since(), name, totals[i])
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
