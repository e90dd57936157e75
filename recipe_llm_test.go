package throttler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/fakellm"
	"github.com/redis/go-redis/v9"
)

// OpenAI meters each organization (or project) in requests and tokens per
// minute, and counts a call's tokens as it arrives at its prompt plus its
// max_tokens, the most it may write, then at what it used once it ends
// (its help center: usage is estimated from max_tokens; contexts, prompts
// plus max_tokens, count). So reserve what OpenAI counts: the prompt's
// tokens plus max_tokens, which the caller knows and puts on the request's
// context (ContextWithCost); Actual reads the usage, and the surplus goes
// back to every replica as the call ends. A call that reserves its prompt
// only is admitted where OpenAI refuses it.
//
// Two Throttlers per replica: tokens outside (the long waits), requests
// inside, right before the send; both Transports read OpenAI's refusals
// (Counters: OpenAI()), so that a 429 pauses both; Retries on the outer
// one only, so that a retry reserves its tokens anew (a 429 settles at 0).
//
// Here three replicas with ten goroutines each make 60 calls against a
// stand-in that enforces that accounting, a minute lasting a second.
func ExampleTransport_openAI() {
	rdb, stop := embeddedRedis()
	defer stop()
	const minute = time.Second // the stand-in's minute, compressed
	api := fakellm.New(fakellm.Config{Accounting: fakellm.OpenAI, Tokens: 10000, Requests: 500, Window: minute,
		FirstToken: 5 * time.Millisecond, PerToken: 100 * time.Microsecond})
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	// The token Throttler counts units of 10 tokens: a call holds tens of
	// members in Redis, not hundreds. Estimates and usage round up.
	const unit = 10
	units := func(tokens int) int { return (tokens + unit - 1) / unit }
	replica := func() *http.Client {
		rc := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr}) // each replica its own
		// The buffer covers a call's way from its admission here to its
		// arrival at the API, the request Throttler's round trip
		// included: 50ms by default; more for the stand-in's compressed
		// minute on a loaded test machine.
		tokens, err := throttler.New(rc, "{openai}:tpm", 10000/unit, minute, throttler.WithBuffer(200*time.Millisecond))
		if err != nil {
			panic(err)
		}
		requests, err := throttler.New(rc, "{openai}:rpm", 500, minute)
		if err != nil {
			panic(err)
		}
		return &http.Client{Transport: &throttler.Transport{
			Route: tokens.Route(),
			Cost: &throttler.Cost{Actual: func(resp *http.Response, tail []byte) (int, bool) { // no Estimate: the context's cost
				used, ok := usageTokens(resp, tail)
				return units(used), ok
			}},
			Counters: throttler.OpenAI(), // its refusals only: a Cost Transport follows no counter
			Retries:  2,                  // here, on the outer Transport only
			Base: &throttler.Transport{
				Route:    requests.Route(),
				Counters: throttler.OpenAI(), // x-ratelimit-*-requests, and the refusals
				Base:     srv.Client().Transport,
			},
		}}
	}
	// A chat completion as the caller sends it: it knows its prompt's
	// tokens (its tokenizer; here the stand-in's) and its max_tokens.
	ask := func(ctx context.Context, client *http.Client, prompt string, maxTokens int) error {
		ctx = throttler.ContextWithCost(ctx, units(fakellm.PromptTokens(prompt)+maxTokens))
		body, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "max_tokens": maxTokens,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body) // the end of the body settles the call
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}

	failed := runLLM(3, 10, 2, replica, ask)
	s := api.Stats()
	fmt.Println("calls answered:", s.Accepted, "of 60; failed:", failed)
	fmt.Println("429s:", s.Rejected)
	fmt.Println("tokens in any minute within the limit:", s.MaxTokensInWindow <= s.TokenLimit)
	// Output:
	// calls answered: 60 of 60; failed: 0
	// 429s: 0
	// tokens in any minute within the limit: true
}

// runLLM runs replicas, each with its own client, goroutines each, every
// goroutine making calls calls of fakellm's workload (not streamed) with
// ask, and returns how many failed.
func runLLM(replicas, goroutines, calls int, replica func() *http.Client, ask func(context.Context, *http.Client, string, int) error) int {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
	)
	for r := range replicas {
		client := replica()
		for g := range goroutines {
			rng := rand.New(rand.NewPCG(uint64(r), uint64(g)))
			wg.Go(func() {
				for range calls {
					w := fakellm.Workload(rng)
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					err := ask(ctx, client, w.Prompt, w.MaxTokens)
					cancel()
					if err != nil {
						mu.Lock()
						failed++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	return failed
}

// TestOpenAIRecipeEstimates measures what the estimate does against the
// stand-in's OpenAI accounting (a call counts its prompt plus max_tokens
// until it ends): three replicas with ten goroutines each call for four of
// the stand-in's minutes (two seconds each), reserving either the prompt
// plus max_tokens or the prompt only, settled with the usage either way,
// no retries. Prompt plus max_tokens reserves what the API counts: no 429
// (the throttler's guarantee, given the buffer), whatever the machine.
// The prompt only lets calls through that the API counts at their
// max_tokens while they run: refused.
func TestOpenAIRecipeEstimates(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const minute, minutes, unit = 2 * time.Second, 4, 10
	units := func(tokens int) int { return (tokens + unit - 1) / unit }
	for _, tt := range []struct {
		name     string
		estimate func(prompt, maxTokens int) int
	}{
		{"prompt + max_tokens", func(p, m int) int { return p + m }},
		{"prompt only", func(p, _ int) int { return p }},
	} {
		rdb, stop := embeddedRedis()
		api := fakellm.New(fakellm.Config{Accounting: fakellm.OpenAI, Tokens: 10000, Requests: 500, Window: minute,
			FirstToken: 10 * time.Millisecond, PerToken: 200 * time.Microsecond})
		srv := httptest.NewServer(api)
		var clients []*http.Client
		for range 3 {
			rc := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
			tokens, err := throttler.New(rc, "{openai}:tpm", 10000/unit, minute, throttler.WithBuffer(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			requests, err := throttler.New(rc, "{openai}:rpm", 500, minute)
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, &http.Client{Transport: &throttler.Transport{
				Route: tokens.Route(), Counters: throttler.OpenAI(),
				Cost: &throttler.Cost{
					Estimate: func(req *http.Request) int { return units(tt.estimate(fakellm.Asked(req))) },
					Actual: func(resp *http.Response, tail []byte) (int, bool) {
						u, ok := fakellm.ParseUsage(tail)
						return units(u.TotalTokens), ok
					},
				},
				Base: &throttler.Transport{Route: requests.Route(), Counters: throttler.OpenAI(), Base: srv.Client().Transport},
			}})
		}
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		time.AfterFunc(minutes*minute, cancel)
		var wg sync.WaitGroup
		var failed atomic.Int64
		for r, c := range clients {
			for g := range 10 {
				rng := rand.New(rand.NewPCG(uint64(r), uint64(g)))
				wg.Go(func() {
					for ctx.Err() == nil {
						body, _ := json.Marshal(fakellm.Workload(rng))
						req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+fakellm.Path, bytes.NewReader(body))
						resp, err := c.Do(req)
						if err != nil {
							continue // the run ended while it waited
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							failed.Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
		end := time.Now()
		srv.Client().CloseIdleConnections()
		srv.Close()
		stop()
		s := api.Stats()
		use := float64(api.TokensBetween(start.Add(minute), end)) / (10000 * float64(end.Sub(start.Add(minute))) / float64(minute))
		t.Logf("%s: %d calls answered, %d 429s (%d failed calls), most tokens in a minute %d of 10000, token use after the first minute %.1f%%",
			tt.name, s.Accepted, s.Rejected, failed.Load(), s.MaxTokensInWindow, 100*use)
		if s.MaxTokensInWindow > s.TokenLimit || s.Accepted == 0 {
			t.Errorf("%s: %d calls answered, at most %d tokens in a minute (limit %d)", tt.name, s.Accepted, s.MaxTokensInWindow, s.TokenLimit)
		}
		switch {
		case tt.name == "prompt + max_tokens" && s.Rejected != 0:
			t.Errorf("%s: %d 429s, want none: the estimate is what the API counts", tt.name, s.Rejected)
		case tt.name == "prompt only" && s.Rejected == 0:
			t.Errorf("%s: no 429, want some: the API counts a running call at its max_tokens", tt.name)
		}
	}
}
