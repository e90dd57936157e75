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
	request := func(ctx context.Context, prompt string, maxTokens int) *http.Request {
		ctx = throttler.ContextWithCost(ctx, units(fakellm.PromptTokens(prompt)+maxTokens))
		body, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "max_tokens": maxTokens,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(body))
		return req
	}

	failed := runLLM(3, 10, 2, replica, request)
	s := api.Stats()
	fmt.Println("calls answered:", s.Accepted, "of 60; failed:", failed)
	fmt.Println("429s:", s.Rejected)
	fmt.Println("tokens in any minute within the limit:", s.MaxTokensInWindow <= s.TokenLimit)
	// Output:
	// calls answered: 60 of 60; failed: 0
	// 429s: 0
	// tokens in any minute within the limit: true
}

// Anthropic meters each organization in requests, input tokens and
// output tokens per minute, each its own limit, and counts a call's output
// at its max_tokens as it begins, adjusted to what it wrote once it ends
// (its "Rate limits" page: OTPM is estimated from max_tokens at the
// beginning of each request and adjusted at its end). So reserve what
// Anthropic counts, on a Throttler per limit: output tokens at max_tokens
// (Estimate reads it from a copy of the body), input tokens at the count
// the caller made (its token-counting call, or its own), carried on the
// context (ContextWithCost). Each Actual reads its part of the usage, and
// the surplus goes back as the call ends.
//
// Three Transports per replica, output tokens outside (they make the long
// waits), input tokens, then requests; every one reads Anthropic's
// refusals (Counters: Anthropic()), so that a 429 pauses all three;
// Retries on the outer one only.
//
// Here three replicas with ten goroutines each make 60 calls against a
// stand-in that enforces that accounting, a minute lasting a second.
func ExampleTransport_anthropic() {
	rdb, stop := embeddedRedis()
	defer stop()
	const minute = time.Second // the stand-in's minute, compressed
	api := fakellm.New(fakellm.Config{Accounting: fakellm.Anthropic, InputTokens: 20000, OutputTokens: 8000, Requests: 500,
		Window: minute, FirstToken: 5 * time.Millisecond, PerToken: 100 * time.Microsecond})
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	const unit = 10 // tokens per unit of the token Throttlers
	units := func(tokens int) int { return (tokens + unit - 1) / unit }
	usage := func(part func(anthropicUsage) int) func(*http.Response, []byte) (int, bool) {
		return func(resp *http.Response, tail []byte) (int, bool) {
			var body struct{ Usage *anthropicUsage }
			if json.Unmarshal(tail, &body) != nil || body.Usage == nil {
				return 0, false // the estimate stands
			}
			return units(part(*body.Usage)), true
		}
	}
	replica := func() *http.Client {
		rc := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr}) // each replica its own
		// The buffer covers a call's way from its admission to the API,
		// the inner Throttlers' round trips included (see the OpenAI
		// recipe).
		output, err := throttler.New(rc, "{anthropic}:otpm", 8000/unit, minute, throttler.WithBuffer(200*time.Millisecond))
		if err != nil {
			panic(err)
		}
		input, err := throttler.New(rc, "{anthropic}:itpm", 20000/unit, minute, throttler.WithBuffer(200*time.Millisecond))
		if err != nil {
			panic(err)
		}
		requests, err := throttler.New(rc, "{anthropic}:rpm", 500, minute)
		if err != nil {
			panic(err)
		}
		return &http.Client{Transport: &throttler.Transport{
			Route: output.Route(),
			Cost: &throttler.Cost{
				Estimate: func(req *http.Request) int { return units(maxTokensOf(req)) },
				Actual:   usage(func(u anthropicUsage) int { return u.OutputTokens }),
			},
			Counters: throttler.Anthropic(), // its refusals only: a Cost Transport follows no counter
			Retries:  2,                     // here, on the outer Transport only
			Base: &throttler.Transport{
				Route: input.Route(),
				Cost: &throttler.Cost{ // no Estimate: the context's cost
					Actual: usage(func(u anthropicUsage) int { return u.InputTokens + u.CacheCreationInputTokens }),
				},
				Counters: throttler.Anthropic(),
				Base: &throttler.Transport{
					Route:    requests.Route(),
					Counters: throttler.Anthropic(), // anthropic-ratelimit-requests-*, and the refusals
					Base:     srv.Client().Transport,
				},
			},
		}}
	}
	// A message as the caller sends it: it knows its input tokens (here
	// the stand-in's count) and its max_tokens.
	request := func(ctx context.Context, prompt string, maxTokens int) *http.Request {
		ctx = throttler.ContextWithCost(ctx, units(fakellm.PromptTokens(prompt)))
		body, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": maxTokens,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/messages", bytes.NewReader(body))
		return req
	}

	failed := runLLM(3, 10, 2, replica, request)
	s := api.Stats()
	fmt.Println("calls answered:", s.Accepted, "of 60; failed:", failed)
	fmt.Println("429s:", s.Rejected)
	fmt.Println("input and output tokens in any minute within their limits:",
		s.MaxInputInWindow <= s.InputLimit && s.MaxOutputInWindow <= s.OutputLimit)
	// Output:
	// calls answered: 60 of 60; failed: 0
	// 429s: 0
	// input and output tokens in any minute within their limits: true
}

// anthropicUsage is the usage of an Anthropic message: cache reads do not
// count toward the input tokens limit (for most models), cache writes do.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// maxTokensOf reads a request's max_tokens from a copy of its body
// (GetBody, which http.NewRequest sets for a bytes.Reader, a
// bytes.Buffer or a strings.Reader): 0 when it cannot, which a Transport
// refuses as an estimate below 1.
func maxTokensOf(req *http.Request) int {
	if req.GetBody == nil {
		return 0
	}
	body, err := req.GetBody()
	if err != nil {
		return 0
	}
	defer body.Close()
	var asked struct {
		MaxTokens int `json:"max_tokens"`
	}
	json.NewDecoder(body).Decode(&asked)
	return asked.MaxTokens
}

// runLLM runs replicas, each with its own client, goroutines each, every
// goroutine making calls calls of fakellm's workload (not streamed), each
// the request request makes, read to the end of its body (which settles
// it), and returns how many failed or were answered other than 200.
func runLLM(replicas, goroutines, calls int, replica func() *http.Client, request func(context.Context, string, int) *http.Request) int {
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
	)
	for r := range replicas {
		client := replica()
		for g := range goroutines {
			rng := rand.New(rand.NewPCG(uint64(r), uint64(g)))
			wg.Go(func() {
				for range calls {
					w := fakellm.Workload(rng)
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					resp, err := client.Do(request(ctx, w.Prompt, w.MaxTokens))
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					cancel()
					if err != nil || resp.StatusCode != http.StatusOK {
						failed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	return int(failed.Load())
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
			defer rc.Close()
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
		start := time.Now()
		failed := loadLLM(minutes*minute, clients, srv.URL+fakellm.Path, true)
		end := time.Now()
		srv.Client().CloseIdleConnections()
		srv.Close()
		stop()
		s := api.Stats()
		use := float64(api.TokensBetween(start.Add(minute), end)) / (10000 * float64(end.Sub(start.Add(minute))) / float64(minute))
		t.Logf("%s: %d calls answered, %d 429s (%d failed calls), most tokens in a minute %d of 10000, token use after the first minute %.1f%%",
			tt.name, s.Accepted, s.Rejected, failed, s.MaxTokensInWindow, 100*use)
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

// loadLLM has ten goroutines per client call url for d with fakellm's
// workload (streamed or not as it draws, when stream is set), reading
// each answer to its end, and returns how many calls were answered
// other than 200.
func loadLLM(d time.Duration, clients []*http.Client, url string, stream bool) int64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(d, cancel)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for r, c := range clients {
		for g := range 10 {
			rng := rand.New(rand.NewPCG(uint64(r), uint64(g)))
			wg.Go(func() {
				for ctx.Err() == nil {
					w := fakellm.Workload(rng)
					w.Stream = w.Stream && stream
					body, _ := json.Marshal(w)
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
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
	return failed.Load()
}

// TestAnthropicRecipeEstimates measures the output estimate against the
// stand-in's Anthropic accounting (a call's output counts at its
// max_tokens until it ends): three replicas with ten goroutines each call
// for four of the stand-in's minutes (two seconds each), reserving output
// tokens at max_tokens or at half of it (about what a call writes on
// average here), settled with the usage either way, no retries. At
// max_tokens, no 429 (the throttler's guarantee, given the buffer); at
// the average, the API counts running calls at more than was reserved:
// refused.
func TestAnthropicRecipeEstimates(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const minute, minutes, unit = 2 * time.Second, 4, 10
	units := func(tokens int) int { return (tokens + unit - 1) / unit }
	for _, tt := range []struct {
		name   string
		output func(maxTokens int) int
	}{
		{"output at max_tokens", func(m int) int { return m }},
		{"output at half max_tokens", func(m int) int { return m / 2 }},
	} {
		rdb, stop := embeddedRedis()
		api := fakellm.New(fakellm.Config{Accounting: fakellm.Anthropic, InputTokens: 20000, OutputTokens: 8000, Requests: 500,
			Window: minute, FirstToken: 10 * time.Millisecond, PerToken: 200 * time.Microsecond})
		srv := httptest.NewServer(api)
		var clients []*http.Client
		for range 3 {
			rc := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
			defer rc.Close()
			var th [3]*throttler.Throttler
			for i, q := range []struct {
				key   string
				limit int
			}{{"{anthropic}:otpm", 8000 / unit}, {"{anthropic}:itpm", 20000 / unit}, {"{anthropic}:rpm", 500}} {
				var err error
				if th[i], err = throttler.New(rc, q.key, q.limit, minute, throttler.WithBuffer(200*time.Millisecond)); err != nil {
					t.Fatal(err)
				}
			}
			usage := func(part func(fakellm.Usage) int) func(*http.Response, []byte) (int, bool) {
				return func(_ *http.Response, tail []byte) (int, bool) {
					u, ok := fakellm.ParseUsage(tail)
					return units(part(u)), ok
				}
			}
			clients = append(clients, &http.Client{Transport: &throttler.Transport{
				Route: th[0].Route(), Counters: throttler.Anthropic(),
				Cost: &throttler.Cost{
					Estimate: func(req *http.Request) int { _, m := fakellm.Asked(req); return units(tt.output(m)) },
					Actual:   usage(func(u fakellm.Usage) int { return u.OutputTokens }),
				},
				Base: &throttler.Transport{
					Route: th[1].Route(), Counters: throttler.Anthropic(),
					Cost: &throttler.Cost{
						Estimate: func(req *http.Request) int { p, _ := fakellm.Asked(req); return units(p) },
						Actual:   usage(func(u fakellm.Usage) int { return u.InputTokens }),
					},
					Base: &throttler.Transport{Route: th[2].Route(), Counters: throttler.Anthropic(), Base: srv.Client().Transport},
				},
			}})
		}
		failed := loadLLM(minutes*minute, clients, srv.URL+fakellm.MessagesPath, false)
		srv.Client().CloseIdleConnections()
		srv.Close()
		stop()
		s := api.Stats()
		t.Logf("%s: %d calls answered, %d 429s (%d for output tokens; %d failed calls), most output tokens in a minute %d of 8000, input %d of 20000",
			tt.name, s.Accepted, s.Rejected, s.RejectedOutput, failed, s.MaxOutputInWindow, s.MaxInputInWindow)
		if s.MaxOutputInWindow > s.OutputLimit || s.MaxInputInWindow > s.InputLimit || s.Accepted == 0 {
			t.Errorf("%s: %d calls answered, at most %d output and %d input tokens in a minute", tt.name, s.Accepted, s.MaxOutputInWindow, s.MaxInputInWindow)
		}
		switch {
		case tt.name == "output at max_tokens" && s.Rejected != 0:
			t.Errorf("%s: %d 429s, want none: the estimate is what the API counts", tt.name, s.Rejected)
		case tt.name == "output at half max_tokens" && s.RejectedOutput == 0:
			t.Errorf("%s: no 429 for output tokens, want some: the API counts a running call at its max_tokens", tt.name)
		}
	}
}
