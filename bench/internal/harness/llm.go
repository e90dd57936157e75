package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/fakellm"
	"github.com/redis/go-redis/v9"
)

// LLMRow holds what the fake LLM API saw of a KindLLM run.
type LLMRow struct {
	TokenLimit   int `json:"token_limit"`   // per interval
	RequestLimit int `json:"request_limit"` // per interval
	Calls        int `json:"calls"`         // that reached the API: accepted and 429
	Rejected     int `json:"rejected"`      // 429s, whole run
	// RejectedAfterWarmup counts the 429s that arrived after the warm-up.
	RejectedAfterWarmup int `json:"rejected_after_warmup"`
	// TokensPerInterval is the tokens accepted after the warm-up per
	// interval; Utilization (on the Row) is it over TokenLimit.
	TokensPerInterval float64 `json:"tokens_per_interval"`
	MaxTokens         int     `json:"max_tokens_in_window"`   // never above TokenLimit: the API refuses
	MaxRequests       int     `json:"max_requests_in_window"` // never above RequestLimit
}

// startLLM serves a fresh fake LLM API with sc's limits on loopback. Its
// time to first token (500ms) and per token (12.5ms) are a real API's,
// scaled as sc's interval scales a minute.
func startLLM(sc Scenario) (api *fakellm.API, url string, stop func(), err error) {
	scale := float64(sc.Interval) / float64(time.Minute)
	api = fakellm.New(fakellm.Config{
		Tokens: sc.Limit, Requests: sc.Requests, Window: sc.Interval, Seed: 1,
		FirstToken: time.Duration(scale * float64(500*time.Millisecond)),
		PerToken:   time.Duration(scale * float64(12500*time.Microsecond)),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	srv := &http.Server{Handler: api}
	go srv.Serve(ln)
	return api, "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// llmTransport is what a KindLLM replica sends through: a Throttler on
// cfg.Limit tokens (in units of cfg.Unit) with a Cost that reserves prompt
// + max_tokens and settles with the usage the answer reports, then a
// Throttler on cfg.Requests calls, then base. Both Throttlers use rdb, and
// reserve ahead a sixtieth of the interval (the library's default of 1s
// for a minute, scaled). admitted counts the calls the tokens admitted.
func llmTransport(cfg ReplicaConfig, rdb *redis.Client, base http.RoundTripper) (rt http.RoundTripper, admitted func() uint64, err error) {
	opts := []throttler.Option{throttler.WithBuffer(cfg.Buffer), throttler.WithReserveAhead(cfg.Interval / 60)}
	limit := cfg.Limit / cfg.Unit
	toks, err := throttler.New(rdb, cfg.Key+":tpm", limit, cfg.Interval, opts...)
	if err != nil {
		return nil, nil, err
	}
	reqs, err := throttler.New(rdb, cfg.Key+":rpm", cfg.Requests, cfg.Interval, opts...)
	if err != nil {
		return nil, nil, err
	}
	units := func(tokens int) int { return (tokens + cfg.Unit - 1) / cfg.Unit }
	cost := &throttler.Cost{
		Estimate: func(req *http.Request) int {
			prompt, maxTokens := fakellm.Asked(req)
			return min(limit, max(1, units(prompt+maxTokens)))
		},
		Actual: func(resp *http.Response, tail []byte) (int, bool) {
			if resp.StatusCode != http.StatusOK {
				return 0, true // a 429 costs nothing
			}
			u, ok := fakellm.ParseUsage(tail)
			return units(u.TotalTokens), ok
		},
	}
	rt = &throttler.Transport{Route: toks.Route(), Cost: cost, Base: reqs.RoundTripper(base)}
	return rt, func() uint64 { return toks.Stats().Waits }, nil
}

// llmLoop is one goroutine of a KindLLM replica: POST a call of
// fakellm.Workload, read the answer to its end (which settles its tokens),
// until the run's context ends. A call counts as measured once answered
// after the warm-up.
func llmLoop(ctx context.Context, cfg ReplicaConfig, client *http.Client, seed uint64, warmEnd time.Time, l *goroutineLog) {
	rng := rand.New(rand.NewPCG(seed, 0x11a))
	for ctx.Err() == nil {
		body, _ := json.Marshal(fakellm.Workload(rng))
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.APIURL+fakellm.Path, bytes.NewReader(body))
		if err != nil {
			l.errors++
			l.firstErr = firstOf(l.firstErr, err)
			return
		}
		resp, err := client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			err = errors.Join(err, resp.Body.Close())
		}
		if ctx.Err() != nil {
			return // the run is over
		}
		switch {
		case err != nil:
			l.errors++
			l.firstErr = firstOf(l.firstErr, err)
			time.Sleep(10 * time.Millisecond) // do not spin on a broken Redis
			continue
		case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests:
			l.apiErrors++
			l.firstErr = firstOf(l.firstErr, fmt.Errorf("api: %s", resp.Status))
		}
		if !time.Now().Before(warmEnd) {
			l.measured++
		}
	}
}

// fillLLM adds what the fake LLM API saw to row: the LLM figures, and as
// the row's utilization, max in window and strict rejects, the tokens'.
func fillLLM(row *Row, sc Scenario, t0 time.Time, api *fakellm.API) {
	s := api.Stats()
	warm, end := t0.Add(sc.Warmup), t0.Add(sc.Duration)
	l := &LLMRow{
		TokenLimit: s.TokenLimit, RequestLimit: s.RequestLimit, Calls: s.Accepted + s.Rejected, Rejected: s.Rejected,
		MaxTokens: s.MaxTokensInWindow, MaxRequests: s.MaxRequestsInWindow,
	}
	for _, r := range api.Rejections() {
		if !r.At.Before(warm) {
			l.RejectedAfterWarmup++
		}
	}
	if intervals := float64(end.Sub(warm)) / float64(sc.Interval); intervals > 0 {
		l.TokensPerInterval = float64(api.TokensBetween(warm, end)) / intervals
		row.Utilization = ptr(l.TokensPerInterval / float64(s.TokenLimit))
	}
	row.LLM = l
	row.MaxInWindow = ptr(l.MaxTokens)
	row.StrictRejects = ptr(l.Rejected)
}
