// Command llm shows the throttler in front of an LLM API that limits both
// tokens and requests per minute, where a call's tokens are known only from
// its response: three replicas share 10,000 tokens and 60 requests a minute
// through Redis, against a fake API (internal/fakellm) that enforces both
// limits on the tokens each call actually used and answers 429 beyond them.
//
// Each replica has its own Redis client, two Throttlers (tokens, requests)
// on keys shared with the others, and an http.Client whose Transport
// reserves a call's estimated tokens, then a request, then sends it:
//
//	&throttler.Transport{Route: tokens.Route(), Cost: cost, Base: requests.RoundTripper(base)}
//
// The token Throttler counts units of -unit tokens. Cost.Estimate reads the
// request's prompt and max_tokens (from a copy of its body, GetBody), and
// Cost.Actual the usage at the end of the response: the JSON body's
// "usage", or a streamed response's last event. Many goroutines per replica
// send prompts of random length with random max_tokens, half of them
// streamed, and read each body to its end.
//
// Three modes run one after the other (or the one -mode picks):
//
//	a  estimate prompt + max_tokens, settle with the actual usage
//	b  the same estimate, never settled but for a 429 (Cost.Actual nil)
//	c  estimate the prompt tokens only, settle with the actual usage
//
// Tokens go first, then the request: a call counts at its admission and
// the API counts it at its arrival, and the buffer covers only a short gap
// between the two. The second wait is part of that gap for the first
// limit, so the limit that makes calls wait long goes first: here tokens
// (60 requests a minute would carry some 24,000 tokens of these calls).
//
// -speed compresses time: the API's minute and the Throttlers' interval are
// both a minute / speed, and so are the API's time to first token and time
// per token, and reserve-ahead (the library's default for a minute, 1s).
// The buffer (-buffer, admission to arrival) is not scaled: it covers real
// network time. Nor are the library's own fixed times: a process with
// callers waiting makes a round trip at least every 500ms, which is when it
// finds the tokens another replica's Settle gave back. At speed 10 those
// 500ms are 5 seconds of the run's minute, so a compressed run uses less of
// the quota than a real one would (mode a on a 2-core VM: 97% at speed 2,
// 92-96% at speed 10, 85% at speed 20, 60% at speed 60). For each mode it prints the requests made, the
// 429s (in all, and after the first minute), the tokens accepted per
// minute, the token utilization, and the most tokens and requests the API
// accepted in any one-minute window.
//
// Token utilization is the tokens the API accepted from the end of the
// first minute to the end of the run, divided by the token limit times the
// minutes in that span. The first minute is left out as a warm-up: the
// window starts empty, so a whole minute's quota goes in at once.
//
// The exit status is 1 if mode a saw a 429, any call failed other than by
// the run ending, or any window at the API held more than a limit (which
// the API's refusals rule out).
//
// Redis is an embedded miniredis unless REDIS_URL is set
// (e.g. REDIS_URL=redis://localhost:6379/0).
//
// Usage:
//
//	go run ./examples/llm [-mode all|a|b|c] [-speed 10] [-minutes 3] [-replicas 3] [-goroutines 8]
//		[-tokens 10000] [-requests 60] [-unit 10] [-buffer 50ms] [-reserve-ahead d] [-seed 1] [-v]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/exampleredis"
	"github.com/go-throttler/throttler/internal/fakellm"
	"github.com/redis/go-redis/v9"
)

type config struct {
	speed, minutes       float64
	replicas, goroutines int
	tokens, requests     int
	unit                 int
	buffer, ahead        time.Duration
	seed                 uint64
	verbose              bool
	out                  io.Writer
}

// minute is the run's minute: a real one divided by the speed.
func (c config) minute() time.Duration { return time.Duration(float64(time.Minute) / c.speed) }

// reserveAhead is -reserve-ahead, or the library's default for a minute
// (one second) scaled by the speed.
func (c config) reserveAhead() time.Duration {
	if c.ahead >= 0 {
		return c.ahead
	}
	return time.Duration(float64(time.Second) / c.speed)
}

// A mode is how calls are priced: what they reserve, and whether they
// settle.
type mode struct {
	name, about string
	estimate    func(promptTokens, maxTokens int) int
	settle      bool
}

var modes = []mode{
	{"a", "estimate prompt+max_tokens, settle", func(p, m int) int { return p + m }, true},
	{"b", "estimate prompt+max_tokens, no settle", func(p, m int) int { return p + m }, false},
	{"c", "estimate prompt only, settle", func(p, _ int) int { return p }, true},
}

func main() {
	c := config{out: os.Stdout}
	which := flag.String("mode", "all", "the mode to run: a, b, c, or all of them in turn")
	flag.Float64Var(&c.speed, "speed", 10, "time compression: a minute of the run lasts a minute / speed")
	flag.Float64Var(&c.minutes, "minutes", 3, "how long each mode runs, in the run's minutes")
	flag.IntVar(&c.replicas, "replicas", 3, "replicas, each with its own Redis client, Throttlers and http.Client")
	flag.IntVar(&c.goroutines, "goroutines", 8, "goroutines per replica sending requests")
	flag.IntVar(&c.tokens, "tokens", 10000, "tokens per minute, at the API and in the Throttlers")
	flag.IntVar(&c.requests, "requests", 60, "requests per minute, at the API and in the Throttlers")
	flag.IntVar(&c.unit, "unit", 10, "tokens per unit of the token Throttler (estimates and usage round up to whole units)")
	flag.DurationVar(&c.buffer, "buffer", 50*time.Millisecond, "throttler.WithBuffer: margin for the time from admission to arrival at the API (not scaled)")
	flag.DurationVar(&c.ahead, "reserve-ahead", -1, "throttler.WithReserveAhead; default: its default for a real minute (1s), scaled by the speed")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the workload and of the API's completion lengths")
	flag.BoolVar(&c.verbose, "v", false, "print the tokens and 429s of each minute as the run goes")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: llm [flags]\n\n"+
			"Replicas share an LLM API's tokens and requests per minute through Redis (miniredis unless REDIS_URL is set).\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	var run []mode
	for _, m := range modes {
		if *which == "all" || *which == m.name {
			run = append(run, m)
		}
	}
	if flag.NArg() > 0 || len(run) == 0 || c.speed <= 0 || c.minutes <= 1 || c.replicas < 1 || c.goroutines < 1 ||
		c.tokens < 1 || c.requests < 1 || c.unit < 1 || c.tokens/c.unit < 1 || c.buffer < 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	os.Exit(runAll(ctx, c, run))
}

// runAll runs the modes in turn, prints the table and returns the exit
// status.
func runAll(ctx context.Context, c config, run []mode) int {
	newClient, where, stop, err := exampleredis.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		return 1
	}
	defer stop()
	fmt.Fprintf(c.out, "%d replicas x %d goroutines; %d tokens and %d requests per minute; a minute lasts %v (speed %g), %g minutes per mode\nRedis: %s\n\n",
		c.replicas, c.goroutines, c.tokens, c.requests, c.minute(), c.speed, c.minutes, where)
	var (
		results []result
		closers []func() error
	)
	defer func() {
		// Let the Throttlers give back what the last run's cancelled
		// waits held (a round trip each, bounded by 250ms) before closing
		// their clients.
		time.Sleep(300 * time.Millisecond)
		for _, f := range closers {
			f()
		}
	}()
	for _, m := range run {
		r, err := runMode(ctx, c, m, newClient, &closers)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		results = append(results, r)
		if ctx.Err() != nil {
			break
		}
	}
	return summary(c, results)
}

// result is what one mode's run came to.
type result struct {
	mode
	api               fakellm.Stats
	rejectedLate      int     // 429s after the first minute
	perMinute         float64 // tokens accepted per minute after the first
	utilization       float64 // perMinute / the token limit
	failed            int64   // calls that failed, other than by the run ending
	settled, returned uint64  // permits settled, units their surpluses gave back
	debt              uint64  // units their excesses added
}

// runMode runs one mode against a fresh API, on fresh keys.
func runMode(ctx context.Context, c config, m mode, newClient func() *redis.Client, closers *[]func() error) (result, error) {
	minute := c.minute()
	api := fakellm.New(fakellm.Config{
		Tokens: c.tokens, Requests: c.requests, Window: minute, Seed: c.seed,
		// About 80 tokens a second after half a second, scaled.
		FirstToken: time.Duration(float64(500*time.Millisecond) / c.speed),
		PerToken:   time.Duration(float64(12500*time.Microsecond) / c.speed),
	})
	srv := httptest.NewServer(api)
	defer srv.Close()

	units := func(tokens int) int { return (tokens + c.unit - 1) / c.unit }
	cost := &throttler.Cost{
		Estimate: func(req *http.Request) int {
			prompt, maxTokens := fakellm.Asked(req) // from a copy of the body
			return min(c.tokens/c.unit, max(1, units(m.estimate(prompt, maxTokens))))
		},
	}
	if m.settle {
		cost.Actual = func(resp *http.Response, tail []byte) (int, bool) {
			if resp.StatusCode != http.StatusOK {
				return 0, true // rejected (400): no tokens used (a refusal settles at 0 without Actual)
			}
			u, ok := fakellm.ParseUsage(tail)
			return units(u.TotalTokens), ok
		}
	}

	// Fresh keys per mode and run, so that runs on a real Redis do not share
	// windows.
	key := fmt.Sprintf("{examples:llm:%d:%s}", time.Now().UnixNano(), m.name)
	var (
		clients []*http.Client
		toks    []*throttler.Throttler
	)
	for range c.replicas {
		rc := newClient()
		// Closed when the program ends: the Throttlers may still be giving
		// back what the run's cancelled waits held.
		*closers = append(*closers, rc.Close)
		tt, err := throttler.New(rc, key+":tpm", c.tokens/c.unit, minute, throttler.WithBuffer(c.buffer), throttler.WithReserveAhead(c.reserveAhead()))
		if err != nil {
			return result{}, err
		}
		rt, err := throttler.New(rc, key+":rpm", c.requests, minute, throttler.WithBuffer(c.buffer), throttler.WithReserveAhead(c.reserveAhead()))
		if err != nil {
			return result{}, err
		}
		base := &http.Transport{MaxIdleConnsPerHost: c.goroutines}
		defer base.CloseIdleConnections()
		clients = append(clients, &http.Client{Transport: &throttler.Transport{
			Route: tt.Route(), Cost: cost, // tokens first: the long waits
			Base: rt.RoundTripper(base), // then the request, right before the send
		}})
		toks = append(toks, tt)
	}

	// The run ends by cancelling its context, not by a deadline: a wait
	// whose slot lies past a deadline fails at once, before the end.
	duration := time.Duration(c.minutes * float64(minute))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	time.AfterFunc(duration, cancel)
	var (
		wg       sync.WaitGroup
		failed   atomic.Int64
		firstErr sync.Once
	)
	start := time.Now()
	for i, hc := range clients {
		for g := range c.goroutines {
			rng := rand.New(rand.NewPCG(c.seed, uint64(i*1000+g)))
			wg.Go(func() {
				for runCtx.Err() == nil {
					err := call(runCtx, hc, srv.URL, rng)
					if runCtx.Err() != nil {
						return // the run is over: what it cut short is no failure
					}
					if err != nil {
						failed.Add(1)
						firstErr.Do(func() { fmt.Fprintf(os.Stderr, "mode %s: call failed: %v\n", m.name, err) })
						time.Sleep(minute / 100) // don't spin on a persistent error
					}
				}
			})
		}
	}
	if c.verbose {
		go progress(runCtx, c.out, api, m.name, minute)
	}
	wg.Wait()
	end := start.Add(duration)
	if now := time.Now(); now.Before(end) {
		end = now // interrupted
	}

	r := result{mode: m, api: api.Stats(), failed: failed.Load()}
	warm := start.Add(minute)
	for _, x := range api.Rejections() {
		if !x.At.Before(warm) {
			r.rejectedLate++
		}
	}
	if end.After(warm) {
		minutes := float64(end.Sub(warm)) / float64(minute)
		r.perMinute = float64(api.TokensBetween(warm, end)) / minutes
		r.utilization = r.perMinute / float64(c.tokens)
	}
	for _, t := range toks {
		s := t.Stats()
		r.settled += s.Costs.Settled
		r.returned += s.Costs.Returned
		r.debt += s.Costs.Debt
	}
	return r, nil
}

// call sends one request of the workload (prompts of 20-200 tokens,
// max_tokens 256, 512 or 1024, half of them streamed) and reads the answer
// to its end.
func call(ctx context.Context, hc *http.Client, url string, rng *rand.Rand) error {
	body, _ := json.Marshal(fakellm.Workload(rng))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+fakellm.Path, bytes.NewReader(body)) // sets GetBody
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body) // the end of the body settles the call's tokens
	err = errors.Join(err, resp.Body.Close())
	if err == nil && resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		err = fmt.Errorf("status %s", resp.Status)
	}
	return err
}

// progress prints, every minute of the run, the tokens and 429s of that
// minute.
func progress(ctx context.Context, w io.Writer, api *fakellm.API, name string, minute time.Duration) {
	tick := time.NewTicker(minute)
	defer tick.Stop()
	start := time.Now()
	seenAcc, seenRej := 0, 0
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		acc, rej := api.Accepted(), api.Rejections()
		tokens := 0
		for _, x := range acc[seenAcc:] {
			tokens += x.Tokens
		}
		fmt.Fprintf(w, "  %s: minute %d (%.1fs): %d requests, %d tokens, %d 429s\n",
			name, n, time.Since(start).Seconds(), len(acc)-seenAcc, tokens, len(rej)-seenRej)
		seenAcc, seenRej = len(acc), len(rej)
	}
}

// summary prints the table and returns the exit status.
func summary(c config, results []result) int {
	w := c.out
	fmt.Fprintf(w, "%-40s %8s %6s %10s %8s %12s %11s %10s %10s\n",
		"mode", "requests", "429s", "429s >1min", "tokens/min", "utilization", "max tok/min", "max req/min", "failed")
	status := 0
	for _, r := range results {
		fmt.Fprintf(w, "%-40s %8d %6d %10d %10.0f %11.1f%% %11d %11d %10d\n",
			r.name+": "+r.about, r.api.Accepted+r.api.Rejected, r.api.Rejected, r.rejectedLate, r.perMinute, 100*r.utilization,
			r.api.MaxTokensInWindow, r.api.MaxRequestsInWindow, r.failed)
		if r.failed > 0 || r.api.MaxTokensInWindow > r.api.TokenLimit || r.api.MaxRequestsInWindow > r.api.RequestLimit ||
			(r.name == "a" && r.api.Rejected > 0) {
			status = 1
		}
	}
	fmt.Fprintf(w, "\nlimits %d tokens and %d requests per minute; utilization = tokens accepted after the first minute / (%d x minutes)\n",
		c.tokens, c.requests, c.tokens)
	for _, r := range results {
		fmt.Fprintf(w, "%s: %d accepted (%d tokens), 429s: %d for tokens, %d for requests; permits settled %d, gave back %d units, added %d units of debt (1 unit = %d tokens)\n",
			r.name, r.api.Accepted, r.api.Tokens, r.api.RejectedTokens, r.api.RejectedRequests, r.settled, r.returned, r.debt, c.unit)
	}
	if status != 0 {
		fmt.Fprintln(w, "\nFAIL: mode a saw a 429, a call failed, or a window went over a limit")
	}
	return status
}
