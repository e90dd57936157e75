// Command counters shows Transport.Counters at work: replicas of a service
// share an API's quota with a consumer outside the throttler (a cron job
// on the same token), whose use only the API's own counter reveals.
//
// It starts a fake API (internal/fakequota) in GitHub's style (a fixed
// window of -limit calls per -window, x-ratelimit-* headers, 403 beyond
// it, and a secondary limit of -secondary calls in any tenth of a window,
// answered 403 with neither retry-after nor remaining 0) or in OpenAI's
// (a sliding window, x-ratelimit-*-requests headers with resets as
// durations, 429 beyond it). -replicas replicas each have their own Redis
// client, their own Throttler (-limit per -window, and, with -burst, at
// most -burst calls in any tenth of a window, below the secondary limit)
// and their own http.Client with a Transport whose Counters are the
// style's preset (-counters=false leaves them out, for comparison). Each
// replica runs -goroutines goroutines that call the API as fast as they
// are let through. At the start of every window (a multiple of -window
// since the epoch) the foreign consumer spends -foreign calls, spread over
// a fifth of the window, straight at the API.
//
// It prints, for each window, the calls of ours the API accepted and
// those of the foreign consumer it counted (in OpenAI's style its refused
// calls count too, as OpenAI's do), the share of what the foreign consumer left
// that ours used, and our refusals; then a summary: the first response
// that revealed the foreign use, our refusals (403 or 429) after it, and
// the share of the remaining quota used over the complete windows after
// it. The exit status is 1 unless there was no refusal after the reveal
// and the share was at least 90%.
//
// Redis is an embedded miniredis unless REDIS_URL is set.
//
// Usage:
//
//	go run ./examples/counters [-style github|openai] [-replicas 3] [-goroutines 10] [-limit 100]
//		[-window 10s] [-windows 6] [-foreign 40] [-burst 20] [-secondary 50] [-backoff 1s] [-counters=true]
//		[-reserve-ahead d] [-buffer 50ms] [-trace file]
//
// -trace writes what the run did, one JSON object a line, for working out
// why a call was refused: see trace.go.
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
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/counters"
	"github.com/go-throttler/throttler/internal/exampleredis"
	"github.com/go-throttler/throttler/internal/fakequota"
	"github.com/redis/go-redis/v9"
)

type config struct {
	style                                         fakequota.Style
	replicas, goroutines, limit, foreign, windows int
	burst, secondary                              int
	window, backoff, buffer                       time.Duration
	ahead                                         time.Duration // < 0: the library's default
	counters                                      bool
	out                                           io.Writer
	trace                                         string // a file to write the run's trace to (see tracer); "" = none
}

func main() {
	c := config{out: os.Stdout}
	style := flag.String("style", "github", "the API's style: github (a fixed window, 403s, a secondary limit) or openai (a sliding window, 429s)")
	flag.IntVar(&c.replicas, "replicas", 3, "replicas, each with its own Redis client, Throttler and http.Client")
	flag.IntVar(&c.goroutines, "goroutines", 10, "goroutines per replica calling the API")
	flag.IntVar(&c.limit, "limit", 100, "calls per window the API allows, across every consumer")
	flag.DurationVar(&c.window, "window", 10*time.Second, "the API's window, and the Throttlers' interval")
	flag.IntVar(&c.windows, "windows", 6, "how many windows to run (from a window's start)")
	flag.IntVar(&c.foreign, "foreign", 40, "calls the foreign consumer spends at the start of every window")
	flag.IntVar(&c.burst, "burst", 20, "throttler.WithLimit: at most this many of our calls in any tenth of a window (0: none)")
	flag.IntVar(&c.secondary, "secondary", 50, "the API's secondary limit: calls in any tenth of a window, across consumers (github only; 0: none)")
	flag.DurationVar(&c.backoff, "backoff", time.Second, "Transport.Backoff: the first back-off from a refusal that does not say until when")
	flag.DurationVar(&c.buffer, "buffer", 50*time.Millisecond, "throttler.WithBuffer")
	flag.BoolVar(&c.counters, "counters", true, "set Transport.Counters to the style's preset")
	flag.StringVar(&c.trace, "trace", "", "write the run's trace to this file, one JSON object a line: every answer, request of ours, Redis round trip and Observer event (see trace.go)")
	c.ahead = -1
	flag.Func("reserve-ahead", "throttler.WithReserveAhead (default: the library's, the window capped at 1s)", func(v string) error {
		d, err := time.ParseDuration(v)
		if err == nil && d < 0 {
			err = errors.New("negative")
		}
		c.ahead = d
		return err
	})
	flag.Parse()
	switch *style {
	case "github":
		c.style = fakequota.GitHub
	case "openai":
		c.style = fakequota.OpenAI
	default:
		flag.Usage()
		os.Exit(2)
	}
	if flag.NArg() > 0 || c.replicas < 1 || c.goroutines < 1 || c.limit < 1 || c.foreign < 0 || c.foreign >= c.limit ||
		c.windows < 2 || c.window < 100*time.Millisecond || c.burst < 0 || c.secondary < 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	newClient, where, stop, err := exampleredis.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		os.Exit(1)
	}
	defer stop()
	fmt.Fprintf(c.out, "style %s: %d per %s shared by %d replicas x %d goroutines and a foreign consumer spending %d a window; burst %d, secondary %d, counters %v; Redis: %s\n\n",
		c.style, c.limit, c.window, c.replicas, c.goroutines, c.foreign, c.burst, c.secondary, c.counters, where)
	r, err := run(ctx, c, newClient)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if !r.ok {
		os.Exit(1)
	}
}

// result is what one run found.
type result struct {
	ok                        bool
	revealed                  bool
	refusedAfter, refusedAll  int
	secondary                 int
	share                     float64 // of the remaining quota, over the complete windows after the reveal
	ours, remaining, complete int
	pauses                    uint64
}

func run(ctx context.Context, c config, dial func() *redis.Client) (result, error) {
	api := fakequota.New(fakequota.Config{
		Style: c.style, Limit: c.limit, Window: c.window,
		Secondary: c.secondary, SecondaryWindow: c.window / 10,
	}, func(consumer string) bool { return consumer == "foreign" })
	srv := httptest.NewServer(api)
	defer srv.Close()

	key := fmt.Sprintf("{counters:%d}", time.Now().UnixNano()) // a fresh quota per run
	var (
		thrs    []*throttler.Throttler
		clients []*http.Client
		tc      *tracer
	)
	if c.trace != "" {
		tc = newTracer()
	}
	for i := range c.replicas {
		name := fmt.Sprintf("r%d", i)
		rc := dial()
		defer rc.Close()
		opts := []throttler.Option{throttler.WithBuffer(c.buffer)}
		if tc != nil {
			rc.AddHook(redisTrace{tc: tc, replica: name, key: key + ":window"})
			opts = append(opts, throttler.WithObserver(tc.observer(name)))
		}
		if c.burst > 0 {
			opts = append(opts, throttler.WithLimit(key+":burst", c.burst, c.window/10))
		}
		if c.ahead >= 0 {
			opts = append(opts, throttler.WithReserveAhead(c.ahead))
		}
		t, err := throttler.New(rc, key+":window", c.limit, c.window, opts...)
		if err != nil {
			return result{}, err
		}
		conns := http.DefaultTransport.(*http.Transport).Clone()
		conns.MaxIdleConnsPerHost = c.goroutines
		defer conns.CloseIdleConnections()
		var base http.RoundTripper = conns
		if tc != nil {
			base = &tracingRT{tc: tc, base: conns, replica: name}
		}
		tr := &throttler.Transport{Base: base, Route: t.Route(), Backoff: c.backoff}
		if c.counters {
			tr.Counters = counters.GitHub()
			if c.style == fakequota.OpenAI {
				tr.Counters = counters.OpenAI()
			}
		}
		thrs = append(thrs, t)
		clients = append(clients, &http.Client{Transport: tr})
	}

	// Start on a window's start, so that every window is whole.
	start := time.Now().Truncate(c.window).Add(c.window)
	if !sleep(ctx, time.Until(start)) {
		return result{}, ctx.Err()
	}
	end := start.Add(time.Duration(c.windows) * c.window)
	runCtx, cancel := context.WithDeadline(ctx, end)
	defer cancel()

	var wg sync.WaitGroup
	wg.Go(func() { spendForeign(runCtx, c, srv.URL, start) })
	for i, hc := range clients {
		name := fmt.Sprintf("r%d", i)
		for range c.goroutines {
			wg.Go(func() {
				for runCtx.Err() == nil {
					err := call(runCtx, hc, srv.URL, name)
					switch {
					case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
						return // the run is over, or this goroutine's next slot is after its end
					case err != nil:
						fmt.Fprintln(os.Stderr, "call:", err)
						sleep(runCtx, 100*time.Millisecond)
					}
				}
			})
		}
	}
	wg.Wait()
	var pauses uint64
	for _, t := range thrs {
		pauses += t.Stats().Pauses
	}
	answers := api.Answers()
	r := summarize(c, answers, start)
	r.pauses = pauses
	if tc != nil {
		if err := tc.write(c.trace, c, start, answers); err != nil {
			return r, fmt.Errorf("trace: %w", err)
		}
		fmt.Fprintf(c.out, "trace written to %s\n", c.trace)
	}
	fmt.Fprintf(c.out, "Throttlers' pauses (learned, summed over replicas): %d\n", pauses)
	return r, nil
}

// spendForeign makes the foreign consumer's calls: c.foreign at the start
// of every window, spread over its first fifth, straight at the API.
func spendForeign(ctx context.Context, c config, url string, start time.Time) {
	if c.foreign == 0 {
		return
	}
	gap := c.window / 5 / time.Duration(c.foreign)
	for w := start; ctx.Err() == nil; w = w.Add(c.window) {
		for i := range c.foreign {
			if !sleep(ctx, time.Until(w.Add(time.Duration(i)*gap))) {
				return
			}
			call(ctx, http.DefaultClient, url, "foreign")
		}
	}
}

// call makes one GET as consumer and reads the answer.
func call(ctx context.Context, hc *http.Client, url, consumer string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set(fakequota.ConsumerHeader, consumer)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return errors.Join(err, resp.Body.Close())
}

// summarize prints a line per window and the summary, and checks the run.
func summarize(c config, answers []fakequota.Answer, start time.Time) result {
	var r result
	var reveal time.Time
	for _, a := range answers {
		if a.Consumer != "foreign" && a.Foreign > 0 {
			reveal, r.revealed = a.At, true
			break
		}
	}
	// foreign: the foreign consumer's calls the API counted (its refused
	// ones too, in OpenAI's style, as OpenAI counts them).
	type win struct{ ours, foreign, foreignRefused, refused int }
	wins := make([]win, c.windows)
	for _, a := range answers {
		i := int(a.At.Sub(start) / c.window)
		if i < 0 || i >= c.windows {
			continue
		}
		switch {
		case a.Consumer == "foreign":
			if a.Status == http.StatusOK || c.style == fakequota.OpenAI {
				wins[i].foreign++
			}
			if a.Status != http.StatusOK {
				wins[i].foreignRefused++
			}
		case a.Status == http.StatusOK:
			wins[i].ours++
		default:
			wins[i].refused++
			r.refusedAll++
			if a.Secondary {
				r.secondary++
			}
			if r.revealed && a.At.After(reveal) {
				r.refusedAfter++
			}
		}
	}
	revealWin := -1
	if r.revealed {
		revealWin = int(reveal.Sub(start) / c.window)
	}
	for i, w := range wins {
		left := c.limit - w.foreign
		fmt.Fprintf(c.out, "window %d  ours %3d  foreign %3d (refused %2d)  used of what was left %5.1f%%  our refusals %d\n",
			i+1, w.ours, w.foreign, w.foreignRefused, 100*float64(w.ours)/float64(max(left, 1)), w.refused)
		if i > revealWin && revealWin >= 0 {
			r.ours += w.ours
			r.remaining += left
			r.complete++
		}
	}
	if r.remaining > 0 {
		r.share = float64(r.ours) / float64(r.remaining)
	}
	fmt.Fprintln(c.out)
	if r.revealed {
		fmt.Fprintf(c.out, "the foreign use was first revealed %s into the run, in window %d\n", reveal.Sub(start).Round(time.Millisecond), revealWin+1)
	} else {
		fmt.Fprintln(c.out, "no response revealed the foreign use")
	}
	fmt.Fprintf(c.out, "our refusals (403/429): %d in all, %d after the reveal (%d by the secondary limit in all)\n", r.refusedAll, r.refusedAfter, r.secondary)
	fmt.Fprintf(c.out, "over the %d complete windows after the reveal: ours used %d of the %d calls the foreign consumer left: %.1f%%\n",
		r.complete, r.ours, r.remaining, 100*r.share)
	r.ok = r.revealed && r.refusedAfter == 0 && r.share >= 0.9
	verdict := "OK"
	if !r.ok {
		var why []string
		if !r.revealed {
			why = append(why, "not revealed")
		}
		if r.refusedAfter > 0 {
			why = append(why, "refusals after the reveal")
		}
		if r.share < 0.9 {
			why = append(why, "under 90% of the remaining quota used")
		}
		verdict = "FAILED: " + strings.Join(why, ", ")
	}
	fmt.Fprintln(c.out, verdict)
	return r
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
