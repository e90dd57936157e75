// Command prometheus shows how to export a Throttler's observability as
// Prometheus metrics: a Collector reads Stats at scrape time (the counters
// and gauges), and a WaitHistogram fed by the Throttler's Observer records
// how long each admitted call waited.
//
// It creates a Throttler of -limit calls per -interval, registers both in a
// fresh registry and serves it on -addr at /metrics, while -workers
// goroutines call Wait in a loop, one more probes with Allow every 100ms,
// and a shared pause of 200ms is set after one second, so that every kind of
// counter moves. With -once it runs the traffic for two seconds, prints the
// throttler_ metrics that /metrics would serve, and exits.
//
// Redis is an embedded miniredis unless REDIS_URL is set
// (e.g. REDIS_URL=redis://localhost:6379/0).
//
// Usage:
//
//	go run . [-addr 127.0.0.1:9464] [-limit 50] [-interval 1s] [-workers 4] [-once]
//
// This example is its own Go module, so that the library's users do not
// download client_golang.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/go-throttler/throttler"
)

// key is the Redis key of the example's shared window, and the metrics' key label.
const key = "example-api"

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "address to serve /metrics on")
	limit := flag.Int("limit", 50, "calls allowed per interval")
	interval := flag.Duration("interval", time.Second, "length of the sliding window")
	workers := flag.Int("workers", 4, "goroutines calling Wait in a loop")
	once := flag.Bool("once", false, "run the traffic for 2s, print the throttler_ metrics and exit")
	flag.Parse()
	if flag.NArg() > 0 || *limit < 1 || *interval <= 0 || *workers < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*addr, *limit, *interval, *workers, *once); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
}

func run(addr string, limit int, interval time.Duration, workers int, once bool) error {
	rdb, where, stopRedis, err := startRedis()
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	defer stopRedis()

	// The histogram's Observer is the Throttler's: it must exist before New.
	// Other events can be received on the same Observer.
	hist := NewWaitHistogram()
	obs := hist.Observer(key)
	obs.Paused = func(until time.Time) {
		slog.Info("shared pause", "key", key, "until", until.Format(time.StampMilli))
	}
	obs.Degraded = func(on bool) { slog.Warn("redis degraded", "key", key, "on", on) }
	t, err := throttler.New(rdb, key, limit, interval, throttler.WithObserver(obs))
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		NewCollector(t),
		hist,
		// What a real service would export besides.
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	handler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if once {
		// Cancel rather than set a deadline: a Wait whose slot comes after
		// its context's deadline fails at once, which would make the last
		// second of traffic a stream of failed Waits.
		ctx, cancel = context.WithCancel(ctx)
		defer time.AfterFunc(2*time.Second, cancel).Stop()
	}
	fmt.Fprintf(os.Stderr, "key %q, limit %d per %v, %d workers; Redis: %s\n", key, limit, interval, workers, where)

	var srv *http.Server
	if !once {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", handler)
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed at Shutdown
		fmt.Fprintf(os.Stderr, "serving http://%s/metrics; Ctrl-C stops\n", ln.Addr())
	}

	traffic(ctx, t, workers)

	if srv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		return srv.Shutdown(sctx)
	}
	// -once: scrape the handler as Prometheus would and print our families.
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("scrape: %d %s", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	return printFamilies(os.Stdout, rec.Body, "throttler_")
}

// traffic calls t.Wait in a loop on workers goroutines, probes with t.Allow
// every 100ms, and sets a 200ms shared pause after one second, until ctx
// ends.
func traffic(ctx context.Context, t *throttler.Throttler, workers int) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := t.Wait(ctx); err != nil && ctx.Err() == nil {
					slog.Error("wait", "err", err)
					time.Sleep(100 * time.Millisecond)
				}
				// The throttled call would go here.
			}
		})
	}
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		pause := time.After(time.Second)
		for {
			select {
			case <-ctx.Done():
				return
			case <-pause:
				// What a Transport does on a 429 with Retry-After.
				if err := t.PauseUntil(ctx, time.Now().Add(200*time.Millisecond)); err != nil && ctx.Err() == nil {
					slog.Error("pause", "err", err)
				}
			case <-tick.C:
				if _, err := t.Allow(ctx); err != nil && ctx.Err() == nil {
					slog.Error("allow", "err", err)
				}
			}
		}
	})
	wg.Wait()
}

// printFamilies copies the lines of the text exposition r that are about
// metrics whose names start with prefix: their samples and their HELP and
// TYPE comments.
func printFamilies(w io.Writer, r io.Reader, prefix string) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name := line
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name = rest
		} else if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name = rest
		}
		if strings.HasPrefix(name, prefix) {
			if _, err := fmt.Fprintln(w, line); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

// startRedis returns a client for REDIS_URL if set, or else for a new
// miniredis, and a function that closes the client and stops the miniredis.
func startRedis() (rdb *redis.Client, where string, stop func(), err error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		rdb = redis.NewClient(opts)
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			return nil, "", nil, errors.Join(err, rdb.Close())
		}
		return rdb, "REDIS_URL (" + opts.Addr + ")", func() { rdb.Close() }, nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return nil, "", nil, err
	}
	rdb = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, "embedded miniredis at " + mr.Addr(), func() { rdb.Close(); mr.Close() }, nil
}
