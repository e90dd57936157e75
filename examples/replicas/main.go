// Command replicas shows what the throttler is for: several replicas of a
// service share one third-party API quota through Redis.
//
// It starts a fake third-party API that answers 429 Too Many Requests as soon
// as more than -limit calls arrive within any -interval, then starts -replicas
// replicas. Each replica has its own Redis client, its own Throttler on the
// same key and its own throttled http.Client, and runs -workers goroutines
// that call the API as fast as they are let through. Every second it prints
// the calls each replica made in that second; at the end it prints a summary,
// checked at the API: no 429s, and no window of length -interval with more
// than -limit calls. The exit status is 1 if either check (or any call) failed.
//
// Redis is an embedded miniredis unless REDIS_URL is set
// (e.g. REDIS_URL=redis://localhost:6379/0).
//
// Usage:
//
//	go run ./examples/replicas [-replicas 3] [-workers 20] [-limit 100] [-interval 1s] [-duration 5s] [-buffer 50ms]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/exampleredis"
	"github.com/go-throttler/throttler/internal/fakeapi"
)

func main() {
	replicas := flag.Int("replicas", 3, "number of replicas, each with its own Redis client and Throttler")
	workers := flag.Int("workers", 20, "goroutines per replica calling the API")
	limit := flag.Int("limit", 100, "calls allowed per interval, by the API and by the throttler")
	interval := flag.Duration("interval", time.Second, "length of the sliding window")
	duration := flag.Duration("duration", 5*time.Second, "how long to run")
	buffer := flag.Duration("buffer", 50*time.Millisecond, "throttler.WithBuffer: margin for the time from admission to arrival at the API")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: replicas [flags]\n\n"+
			"Replicas share one rate-limited API through Redis (miniredis unless REDIS_URL is set).\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 || *replicas < 1 || *workers < 1 || *limit < 1 || *interval <= 0 || *duration <= 0 || *buffer < 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*replicas, *workers, *limit, *interval, *duration, *buffer))
}

func run(replicas, workers, limit int, interval, duration, buffer time.Duration) int {
	newClient, where, stopRedis, err := exampleredis.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		return 1
	}
	defer stopRedis()

	api := fakeapi.New(limit, interval)
	srv := httptest.NewServer(api)
	defer srv.Close()

	// A fresh key per run, so that runs against a real Redis do not share a window.
	key := fmt.Sprintf("examples:replicas:%d", time.Now().UnixNano())
	fmt.Printf("%d replicas x %d workers, limit %d per %v, for %v; Redis: %s\n\n",
		replicas, workers, limit, interval, duration, where)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	ctx, cancelRun := context.WithTimeout(ctx, duration)
	defer cancelRun()

	// One Redis client, Throttler and throttled http.Client per replica, as if
	// each replica were its own process.
	names := make([]string, replicas)
	clients := make([]*http.Client, replicas)
	for i := range replicas {
		names[i] = fmt.Sprintf("r%d", i)
		rc := newClient()
		defer rc.Close()
		thr, err := throttler.New(rc, key, limit, interval, throttler.WithBuffer(buffer))
		if err != nil {
			fmt.Fprintln(os.Stderr, "throttler.New:", err)
			return 1
		}
		clients[i] = &http.Client{Transport: thr.RoundTripper(nil)}
	}

	var (
		wg       sync.WaitGroup
		errCount atomic.Int64
		firstErr sync.Once
	)
	start := time.Now()
	for i, hc := range clients {
		for range workers {
			wg.Go(func() {
				for ctx.Err() == nil {
					err := call(ctx, hc, srv.URL, names[i])
					if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
						return // the run is over, or this worker's next slot is after its end
					}
					if err != nil {
						errCount.Add(1)
						firstErr.Do(func() { fmt.Fprintln(os.Stderr, "call failed:", err) })
						time.Sleep(100 * time.Millisecond) // don't spin on a persistent error
					}
				}
			})
		}
	}

	// Print the calls the API accepted in each second until the run ends.
	perSecond := float64(limit) * float64(time.Second) / float64(interval)
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	lastTick := start
loop:
	for n := 1; ; n++ {
		select {
		case lastTick = <-ticker.C:
			printLine(fmt.Sprintf("t=%ds", n), names, api.TakeCounts(), perSecond)
		case <-ctx.Done():
			break loop
		}
	}
	cancel()
	wg.Wait()
	elapsed := time.Since(start)
	if c := api.TakeCounts(); time.Since(lastTick) > 100*time.Millisecond && c.Accepted+c.Rejected > 0 {
		printLine(fmt.Sprintf("t=%.1fs", elapsed.Seconds()), names, c, perSecond) // the last, partial second
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()

	return summary(api.Stats(), names, elapsed, perSecond, errCount.Load())
}

// call makes one GET request through the throttled client hc.
func call(ctx context.Context, hc *http.Client, url, replica string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set(fakeapi.ReplicaHeader, replica)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return errors.Join(err, resp.Body.Close())
}

// printLine prints one line of per-replica counts.
func printLine(label string, names []string, c fakeapi.Counts, perSecond float64) {
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, " %s=%d", name, c.AcceptedByReplica[name])
	}
	fmt.Printf("%-6s %s  total=%d/%.4g  429s=%d\n", label, b.String(), c.Accepted, perSecond, c.Rejected)
}

// summary prints the result of the run as seen by the API and returns the
// exit status.
func summary(s fakeapi.Stats, names []string, elapsed time.Duration, perSecond float64, errs int64) int {
	verdict := func(ok bool) string {
		if ok {
			return "OK"
		}
		return "FAIL"
	}
	windowOK, rejectedOK, errsOK := s.MaxInWindow <= s.Limit, s.Rejected == 0, errs == 0
	fmt.Printf("\nsummary after %.2fs\n", elapsed.Seconds())
	fmt.Printf("  calls accepted:       %d (%.1f/s; limit %.4g/s)\n", s.Accepted, float64(s.Accepted)/elapsed.Seconds(), perSecond)
	fmt.Printf("  max in any %v window: %d (limit %d)  %s\n", s.Interval, s.MaxInWindow, s.Limit, verdict(windowOK))
	fmt.Printf("  429s:                 %d  %s\n", s.Rejected, verdict(rejectedOK))
	fmt.Printf("  failed calls:         %d  %s\n", errs, verdict(errsOK))
	fmt.Printf("  per replica:         ")
	for _, name := range names {
		share := 0.0
		if s.Accepted > 0 {
			share = 100 * float64(s.AcceptedByReplica[name]) / float64(s.Accepted)
		}
		fmt.Printf(" %s=%d (%.1f%%)", name, s.AcceptedByReplica[name], share)
	}
	fmt.Println()
	if windowOK && rejectedOK && errsOK {
		return 0
	}
	return 1
}
