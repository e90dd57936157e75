// Package fakellm is a fake LLM API, in the shape of OpenAI's chat
// completions, that enforces a tokens-per-window and a requests-per-window
// limit on the tokens each call actually used, as the real thing does. The
// examples and the bench harness call it through the throttler.
//
// POST /v1/chat/completions takes {"prompt": "...", "max_tokens": N,
// "stream": bool}. A call's prompt tokens are PromptTokens(prompt): its
// words. On arrival the API draws the completion's length at random in
// [1, max_tokens] (from a seeded generator) and accepts the call only if its
// prompt plus completion tokens fit the token limit, and the call itself the
// request limit, in the sliding window of length Window ending at its
// arrival. Otherwise it answers 429 with Retry-After, and the call costs
// nothing. An accepted call's tokens count at its arrival time.
//
// A non-streamed answer is one JSON object with the usage in "usage"; a
// streamed one is text/event-stream: a few "data: {...}" chunks, each
// flushed, then a last chunk with no choices that carries the usage (as
// OpenAI's stream_options.include_usage does), then "data: [DONE]".
//
// The API records every accepted call and every 429, so that a run can be
// checked afterwards: no window of length Window ever holds more tokens or
// requests than the limits, because the API refuses what would exceed them.
package fakellm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Path is where the API answers.
const Path = "/v1/chat/completions"

// Request is the body of a call.
type Request struct {
	Prompt    string `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
	Stream    bool   `json:"stream"`
}

// Usage is what a call cost, as the API reports it.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// PromptTokens is the API's tokenizer: the number of words (runs of
// characters other than white space) in prompt.
func PromptTokens(prompt string) int { return len(strings.Fields(prompt)) }

// Config sets an API's limits and pace. Zero fields take their defaults.
type Config struct {
	// Tokens is how many tokens (prompt and completion) the accepted calls
	// of any window may use. Default 10,000.
	Tokens int
	// Requests is how many calls any window may accept. Default 60.
	Requests int
	// Window is the length of the sliding window. Default time.Minute.
	Window time.Duration
	// Seed seeds the completion lengths.
	Seed uint64
	// FirstToken is how long a call takes before its first token, and
	// PerToken how long each completion token takes after it: a
	// non-streamed answer is written once they have passed, a streamed
	// one chunk by chunk. Default 0: at once.
	FirstToken, PerToken time.Duration
	// Now reads the arrival times; default time.Now. It is called with the
	// API's mutex held and must not go backwards.
	Now func() time.Time
}

// Record is one accepted call.
type Record struct {
	At     time.Time // arrival
	Tokens int       // prompt + completion
}

// Rejection is one call answered 429.
type Rejection struct {
	At time.Time
	// Tokens is true when the call did not fit the token limit, Requests
	// when it did not fit the request limit (both may be).
	Tokens, Requests bool
}

// API is the fake. It implements http.Handler and is safe for concurrent
// use. Create one with New.
type API struct {
	cfg Config

	mu       sync.Mutex
	rng      *rand.Rand
	accepted []Record // in order of arrival
	rejected []Rejection
	head     int // accepted[head:] are the calls in the window at the last arrival
	inWindow int // their tokens
	seq      int
}

// New returns an API with cfg's limits. It panics on negative limits or a
// negative window.
func New(cfg Config) *API {
	if cfg.Tokens < 0 || cfg.Requests < 0 || cfg.Window < 0 {
		panic(fmt.Sprintf("fakellm: negative limit or window in %+v", cfg))
	}
	if cfg.Tokens == 0 {
		cfg.Tokens = 10000
	}
	if cfg.Requests == 0 {
		cfg.Requests = 60
	}
	if cfg.Window == 0 {
		cfg.Window = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &API{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x11a11a))}
}

// ServeHTTP answers POST Path; see the package documentation. A malformed
// body, max_tokens below 1, an empty prompt, or a call whose prompt plus
// max_tokens exceeds the token limit (it could never be served) is
// answered 400 and recorded nowhere.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != Path {
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
		return
	}
	var req Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":"malformed body"}`, http.StatusBadRequest)
		return
	}
	prompt := PromptTokens(req.Prompt)
	if prompt < 1 || req.MaxTokens < 1 || prompt+req.MaxTokens > a.cfg.Tokens {
		http.Error(w, `{"error":"empty prompt, or max_tokens out of range"}`, http.StatusBadRequest)
		return
	}
	completion, id, retry := a.admit(prompt, req.MaxTokens)
	if retry > 0 {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintln(w, `{"error":{"type":"rate_limit_exceeded"}}`)
		return
	}
	u := Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	if req.Stream {
		a.stream(w, r, id, u)
		return
	}
	if !a.sleep(r, a.cfg.FirstToken+time.Duration(completion)*a.cfg.PerToken) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id":      id,
		"object":  "chat.completion",
		"choices": []any{map[string]any{"index": 0, "message": map[string]string{"role": "assistant", "content": words(completion)}}},
		"usage":   u,
	})
}

// admit decides a call at its arrival: it returns the completion's length
// and an id, or how long until the call would fit (positive: refused).
func (a *API) admit(prompt, maxTokens int) (completion int, id string, retry time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Now()
	for a.head < len(a.accepted) && now.Sub(a.accepted[a.head].At) >= a.cfg.Window {
		a.inWindow -= a.accepted[a.head].Tokens
		a.head++
	}
	completion = 1 + a.rng.IntN(maxTokens)
	cost := prompt + completion
	live := a.accepted[a.head:]
	var rej Rejection
	if len(live)+1 > a.cfg.Requests {
		rej.Requests = true
		retry = live[len(live)-a.cfg.Requests].At.Add(a.cfg.Window).Sub(now)
	}
	if need := a.inWindow + cost - a.cfg.Tokens; need > 0 {
		rej.Tokens = true
		// The call fits once the oldest calls holding need tokens have left.
		for _, c := range live {
			if need -= c.Tokens; need <= 0 {
				retry = max(retry, c.At.Add(a.cfg.Window).Sub(now))
				break
			}
		}
	}
	if rej.Tokens || rej.Requests {
		rej.At = now
		a.rejected = append(a.rejected, rej)
		return 0, "", max(retry, time.Nanosecond)
	}
	a.accepted = append(a.accepted, Record{At: now, Tokens: cost})
	a.inWindow += cost
	a.seq++
	return completion, "chatcmpl-" + strconv.Itoa(a.seq), 0
}

// streamChunks is how many content events a streamed answer has (fewer
// when the completion has fewer tokens).
const streamChunks = 4

// stream writes u's completion as server-sent events, the usage last.
func (a *API) stream(w http.ResponseWriter, r *http.Request, id string, u Usage) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	event := func(v any) {
		fmt.Fprint(w, "data: ")
		json.NewEncoder(w).Encode(v) // ends with the event's first newline
		fmt.Fprint(w, "\n")
		if flusher != nil {
			flusher.Flush()
		}
	}
	wait := a.cfg.FirstToken
	left := u.CompletionTokens
	for i := range streamChunks {
		n := left / (streamChunks - i)
		if n == 0 {
			continue
		}
		left -= n
		if !a.sleep(r, wait+time.Duration(n)*a.cfg.PerToken) {
			return
		}
		wait = 0
		event(map[string]any{
			"id": id, "object": "chat.completion.chunk",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": words(n)}}},
		})
	}
	event(map[string]any{"id": id, "object": "chat.completion.chunk", "choices": []any{}, "usage": u})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// sleep waits d, or until the caller has gone (then it reports false).
func (a *API) sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// words returns n tokens of text.
func words(n int) string { return strings.TrimSpace(strings.Repeat("tok ", n)) }

// A Workload draws the calls of the examples and the bench: prompts of
// 20-200 tokens, max_tokens of 256, 512 or 1024, and every other call
// streamed, on average. Completions use half of max_tokens on average (the
// API draws them evenly), so a call uses some 410 tokens, and 60 calls
// would need about 24,000: a token limit of 10,000 binds long before a
// request limit of 60.
func Workload(rng *rand.Rand) Request {
	return Request{
		Prompt:    strings.TrimSpace(strings.Repeat("word ", 20+rng.IntN(181))),
		MaxTokens: []int{256, 512, 1024}[rng.IntN(3)],
		Stream:    rng.IntN(2) == 0,
	}
}

// Asked returns the prompt tokens and max_tokens of a request to the API,
// read from a copy of its body (GetBody, which http.NewRequest sets for a
// bytes.Reader); zeros when there is none or it does not parse. It reads
// what a Cost.Estimate needs without touching the body that is sent.
func Asked(req *http.Request) (promptTokens, maxTokens int) {
	if req.GetBody == nil {
		return 0, 0
	}
	rc, err := req.GetBody()
	if err != nil {
		return 0, 0
	}
	defer rc.Close()
	var body Request
	if json.NewDecoder(rc).Decode(&body) != nil {
		return 0, 0
	}
	return PromptTokens(body.Prompt), body.MaxTokens
}

// ParseUsage reads a call's usage from the end of its response body, as a
// client of an OpenAI-style API would: the "usage" of a JSON answer, or of
// the last event of a streamed one that has it. It reports false when tail
// holds neither (a body cut short, or longer than the tail kept).
func ParseUsage(tail []byte) (Usage, bool) {
	var v struct{ Usage *Usage }
	if !bytes.HasPrefix(bytes.TrimSpace(tail), []byte("{")) {
		// Server-sent events: the last data line with a usage.
		var last []byte
		sc := bufio.NewScanner(bytes.NewReader(tail))
		sc.Buffer(nil, len(tail)+1)
		for sc.Scan() {
			if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok && bytes.Contains(data, []byte(`"usage"`)) {
				last = append(last[:0], data...)
			}
		}
		tail = last
	}
	if json.Unmarshal(tail, &v) != nil || v.Usage == nil {
		return Usage{}, false
	}
	return *v.Usage, true
}

// Stats sums up a run.
type Stats struct {
	Accepted, Rejected int
	// RejectedTokens and RejectedRequests count the 429s by the limit they
	// did not fit (a call may fit neither).
	RejectedTokens, RejectedRequests int
	// Tokens is the accepted calls' tokens.
	Tokens int
	// MaxTokensInWindow and MaxRequestsInWindow are the most tokens and
	// calls accepted in any half-open window of length Window: never above
	// TokenLimit and RequestLimit, for the API refuses what would be.
	MaxTokensInWindow, MaxRequestsInWindow int
	TokenLimit, RequestLimit               int
	Window                                 time.Duration
}

// Stats returns the run's figures so far.
func (a *API) Stats() Stats {
	acc, rej := a.Accepted(), a.Rejections()
	s := Stats{Accepted: len(acc), Rejected: len(rej), TokenLimit: a.cfg.Tokens, RequestLimit: a.cfg.Requests, Window: a.cfg.Window}
	for _, r := range rej {
		if r.Tokens {
			s.RejectedTokens++
		}
		if r.Requests {
			s.RejectedRequests++
		}
	}
	i, sum := 0, 0
	for j, c := range acc {
		s.Tokens += c.Tokens
		sum += c.Tokens
		for c.At.Sub(acc[i].At) >= a.cfg.Window {
			sum -= acc[i].Tokens
			i++
		}
		s.MaxTokensInWindow = max(s.MaxTokensInWindow, sum)
		s.MaxRequestsInWindow = max(s.MaxRequestsInWindow, j-i+1)
	}
	return s
}

// Accepted returns a copy of the accepted calls, in order of arrival.
func (a *API) Accepted() []Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.accepted)
}

// Rejections returns a copy of the calls answered 429, in order of arrival.
func (a *API) Rejections() []Rejection {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.rejected)
}

// Window returns the length of the sliding window.
func (a *API) Window() time.Duration { return a.cfg.Window }

// TokensBetween returns the tokens of the calls accepted in [from, to).
func (a *API) TokensBetween(from, to time.Time) int {
	n := 0
	for _, c := range a.Accepted() {
		if !c.At.Before(from) && c.At.Before(to) {
			n += c.Tokens
		}
	}
	return n
}
