// Package fakellm is a fake LLM API, in the shape of OpenAI's chat
// completions (or Anthropic's messages), that enforces a tokens-per-window
// and a requests-per-window limit, counting a call's tokens as its
// Accounting says. The examples, the recipes' tests and the bench harness
// call it through the throttler.
//
// POST Path (or MessagesPath) takes {"prompt": "...", "messages":
// [{"role": "user", "content": "..."}], "max_tokens": N, "stream": bool}.
// A call's prompt tokens are PromptTokens of its prompt and of each
// message's content: their words. On arrival the API draws the
// completion's length at random in [1, max_tokens] (from a seeded
// generator), and accepts the call only if it fits every limit in the
// sliding window of length Window ending at its arrival, counting it and
// the calls before it as the Accounting says:
//
//   - Metered (the default): a call counts its prompt plus completion
//     tokens from its arrival, as an API that knew at once what the call
//     would use. A refused call costs nothing.
//   - OpenAI: a call counts its prompt plus its max_tokens from its
//     arrival; with Strict, for its whole window, else only until its
//     answer is written (just before the usage goes out), when it counts
//     its prompt plus completion. A refused request counts against the
//     request limit all the same. What OpenAI documents: its rate-limit
//     guide ("Rate limits", on reducing max_tokens) says a request's rate
//     limit is calculated as the maximum of max_tokens and the estimated
//     number of tokens based on the character count of the request, and
//     that unsuccessful requests contribute to the per-minute limit; its
//     help center ("What are the best practices for managing my rate
//     limits in the API?") that usage needs are estimated from max_tokens
//     and that contexts (prompts plus max_tokens) count. The prompt plus
//     max_tokens is at least that maximum (when the character estimate is
//     the fake's prompt tokens), and what the help center's contexts are.
//     Neither page says the count is adjusted once the call ends: Strict
//     is what they document, and the adjustment without it is an
//     assumption no OpenAI page states, kept to show what a recipe that
//     gives tokens back would get if OpenAI did adjust. Every response
//     states x-ratelimit-limit-, -remaining- and -reset-requests and
//     -tokens, the resets as durations until the window holds nothing.
//   - Anthropic: input tokens (the prompt) and output tokens have limits
//     of their own (InputTokens, OutputTokens); a call's output counts at
//     its max_tokens from its arrival, and at its completion once its
//     answer is written (with Strict, at max_tokens for its whole window):
//     Anthropic's "Rate limits" page says OTPM is estimated from max_tokens
//     at the beginning of each request and adjusted to the actual output
//     tokens at its end, and ITPM estimated at the beginning and adjusted
//     during the request to the actual input tokens (the fake knows them
//     from the arrival: the prompt's). Every response
//     states anthropic-ratelimit-requests-, -input-tokens-,
//     -output-tokens- and -tokens- (the more restrictive of the two)
//     -limit, -remaining and -reset, the resets in RFC 3339 (whole
//     seconds, rounded up) when the window will hold nothing; a 429
//     carries retry-after and an error of type rate_limit_error.
//     Anthropic describes its limits as token buckets, refilled
//     continuously up to the limit; a sliding window of the same limit
//     and length is stricter: a call it accepts, such a bucket would too.
//     Streaming is not modelled in this style (answered 400).
//
// A call that does not fit is answered 429 with Retry-After (whole
// seconds, rounded up, until it would fit) and counts no tokens.
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

// Path is where the API answers in OpenAI's shape, and MessagesPath in
// Anthropic's; each style answers both.
const (
	Path         = "/v1/chat/completions"
	MessagesPath = "/v1/messages"
)

// Message is one message of a request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is the body of a call.
type Request struct {
	Prompt    string    `json:"prompt,omitempty"`
	Messages  []Message `json:"messages,omitempty"`
	MaxTokens int       `json:"max_tokens"`
	Stream    bool      `json:"stream,omitempty"`
}

// promptTokens is PromptTokens of the prompt and of every message.
func (r Request) promptTokens() int {
	n := PromptTokens(r.Prompt)
	for _, m := range r.Messages {
		n += PromptTokens(m.Content)
	}
	return n
}

// Usage is what a call cost, as the API reports it: prompt_tokens,
// completion_tokens and total_tokens in OpenAI's shape, input_tokens and
// output_tokens in Anthropic's, with its prompt cache's writes and reads
// (cache_creation_input_tokens, cache_read_input_tokens: the fake caches
// nothing, and reports none).
type Usage struct {
	PromptTokens             int `json:"prompt_tokens,omitempty"`
	CompletionTokens         int `json:"completion_tokens,omitempty"`
	TotalTokens              int `json:"total_tokens,omitempty"`
	InputTokens              int `json:"input_tokens,omitempty"`
	OutputTokens             int `json:"output_tokens,omitempty"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens,omitempty"`
}

// PromptTokens is the API's tokenizer: the number of words (runs of
// characters other than white space) in prompt.
func PromptTokens(prompt string) int { return len(strings.Fields(prompt)) }

// Accounting is how the API counts a call's tokens against its limits;
// see the package documentation.
type Accounting int

const (
	// Metered counts a call's actual tokens from its arrival.
	Metered Accounting = iota
	// OpenAI counts prompt plus max_tokens from the arrival, prompt plus
	// completion from the answer's end (not with Strict), and refused
	// requests.
	OpenAI
	// Anthropic counts input and output tokens apart, the output at
	// max_tokens from the arrival and at the completion from the end (not
	// with Strict).
	Anthropic
)

// Config sets an API's limits and pace. Zero fields take their defaults.
type Config struct {
	// Accounting is how a call's tokens count (default Metered).
	Accounting Accounting
	// Strict keeps what a call counted at its arrival for its whole
	// window under the OpenAI and Anthropic accountings: its count is
	// never adjusted once its answer is written. It is what OpenAI
	// documents (see the package documentation). Metered ignores it.
	Strict bool
	// Tokens is how many tokens (prompt and completion) the calls of any
	// window may count (Metered and OpenAI). Default 10,000.
	Tokens int
	// InputTokens and OutputTokens are how many input (prompt) and output
	// (completion) tokens the calls of any window may count (Anthropic).
	// Defaults 10,000 and 4,000.
	InputTokens, OutputTokens int
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
	At time.Time // arrival
	// Tokens is Input + Output: what the call counts against Tokens.
	Tokens int
	// Input is the call's prompt tokens; Output its completion tokens,
	// or its max_tokens while it runs under the OpenAI and Anthropic
	// accountings, and for good with Strict.
	Input, Output int
	// Done reports that the answer was written: Output is the completion,
	// but with Strict.
	Done bool
}

// Rejection is one call answered 429.
type Rejection struct {
	At time.Time
	// Tokens is true when the call did not fit the token limit (Input and
	// Output, the input and output token limits, under the Anthropic
	// accounting), Requests when it did not fit the request limit (a call
	// may fit none).
	Tokens, Input, Output, Requests bool
}

// API is the fake. It implements http.Handler and is safe for concurrent
// use. Create one with New.
type API struct {
	cfg Config

	mu       sync.Mutex
	rng      *rand.Rand
	accepted []Record // in order of arrival
	rejected []Rejection
	head     int    // accepted[head:] are the calls in the window at the last arrival
	sums     Record // their Tokens, Input and Output
	// requests are the arrivals that count against the request limit
	// (accepted calls, and under the OpenAI accounting refused ones too),
	// from reqHead on in the window.
	requests []time.Time
	reqHead  int
	seq      int
}

// New returns an API with cfg's limits. It panics on negative limits or a
// negative window.
func New(cfg Config) *API {
	if cfg.Tokens < 0 || cfg.InputTokens < 0 || cfg.OutputTokens < 0 || cfg.Requests < 0 || cfg.Window < 0 ||
		cfg.Accounting < Metered || cfg.Accounting > Anthropic {
		panic(fmt.Sprintf("fakellm: negative limit or window, or unknown accounting, in %+v", cfg))
	}
	if cfg.Tokens == 0 {
		cfg.Tokens = 10000
	}
	if cfg.InputTokens == 0 {
		cfg.InputTokens = 10000
	}
	if cfg.OutputTokens == 0 {
		cfg.OutputTokens = 4000
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

// ServeHTTP answers POST Path and MessagesPath; see the package
// documentation. A malformed body, max_tokens below 1, an empty prompt, a
// call that could never be served (its prompt plus max_tokens over the
// token limit; under the Anthropic accounting, its prompt over the input
// limit or max_tokens over the output limit), or a streamed call under the
// Anthropic accounting, is answered 400 and recorded nowhere.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || (r.URL.Path != Path && r.URL.Path != MessagesPath) {
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
		return
	}
	req, prompt, msg := a.parse(r)
	if msg != "" {
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	v := a.admit(prompt, req.MaxTokens)
	for name, value := range v.header {
		w.Header().Set(name, value)
	}
	if v.retry > 0 {
		a.refuse(w, v.retry)
		return
	}
	// The call's count is adjusted to its usage before the usage goes out
	// (or once the caller has gone).
	defer a.end(v.index, v.completion)
	u := Usage{PromptTokens: prompt, CompletionTokens: v.completion, TotalTokens: prompt + v.completion}
	if req.Stream {
		a.stream(w, r, v, u)
		return
	}
	if !a.sleep(r, a.cfg.FirstToken+time.Duration(v.completion)*a.cfg.PerToken) {
		return
	}
	a.end(v.index, v.completion)
	a.answer(w, v, u)
}

// parse reads a call's body, and returns it with its prompt tokens, or
// the error message of a 400 when it is malformed or could never be
// served (see ServeHTTP).
func (a *API) parse(r *http.Request) (req Request, prompt int, msg string) {
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return req, 0, `{"error":"malformed body"}`
	}
	prompt = req.promptTokens()
	never := prompt+req.MaxTokens > a.cfg.Tokens
	if a.cfg.Accounting == Anthropic {
		never = prompt > a.cfg.InputTokens || req.MaxTokens > a.cfg.OutputTokens || req.Stream
	}
	if prompt < 1 || req.MaxTokens < 1 || never {
		return req, 0, `{"error":"empty prompt, max_tokens out of range, or a stream not modelled"}`
	}
	return req, prompt, ""
}

// refuse writes a 429 for a call that would fit after retry, in the
// Accounting's vendor's shape.
func (a *API) refuse(w http.ResponseWriter, retry time.Duration) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
	w.WriteHeader(http.StatusTooManyRequests)
	if a.cfg.Accounting == Anthropic {
		fmt.Fprintln(w, `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit."}}`)
	} else {
		fmt.Fprintln(w, `{"error":{"type":"rate_limit_exceeded"}}`)
	}
}

// answer writes a call's answer, not streamed, with its usage u, in the
// Accounting's vendor's shape.
func (a *API) answer(w http.ResponseWriter, v verdict, u Usage) {
	w.Header().Set("Content-Type", "application/json")
	if a.cfg.Accounting == Anthropic {
		json.NewEncoder(w).Encode(map[string]any{
			"id": v.id, "type": "message", "role": "assistant", "stop_reason": "end_turn",
			"content": []any{map[string]string{"type": "text", "text": words(v.completion)}},
			"usage":   Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens},
		})
		return
	}
	json.NewEncoder(w).Encode(map[string]any{
		"id":      v.id,
		"object":  "chat.completion",
		"choices": []any{map[string]any{"index": 0, "message": map[string]string{"role": "assistant", "content": words(v.completion)}}},
		"usage":   u,
	})
}

// verdict is what admit decided of a call.
type verdict struct {
	completion int
	id         string
	index      int           // in accepted
	retry      time.Duration // positive: refused, fits after that long
	header     map[string]string
}

// admit decides a call at its arrival: it draws the completion's length,
// counts the call if it fits (or refuses it, with how long until it would
// fit), and returns the response's rate-limit headers.
func (a *API) admit(prompt, maxTokens int) verdict {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Now()
	a.slide(now)
	v := verdict{completion: 1 + a.rng.IntN(maxTokens)}
	call := Record{At: now, Input: prompt, Output: v.completion, Done: true}
	if a.cfg.Accounting != Metered {
		call.Output, call.Done = maxTokens, false
	}
	call.Tokens = call.Input + call.Output
	if rej, retry := a.misfit(call); retry > 0 {
		a.rejected = append(a.rejected, rej)
		if a.cfg.Accounting == OpenAI {
			a.requests = append(a.requests, now) // refused, and counted all the same
		}
		v.retry = retry
	} else {
		a.accepted = append(a.accepted, call)
		a.requests = append(a.requests, now)
		a.sums = a.sums.plus(call)
		a.seq++
		v.index = len(a.accepted) - 1
		v.id = "call-" + strconv.Itoa(a.seq)
	}
	v.header = a.headers(now)
	return v
}

// slide drops from the window the calls and requests that arrived a
// Window or more before now.
func (a *API) slide(now time.Time) {
	for a.head < len(a.accepted) && now.Sub(a.accepted[a.head].At) >= a.cfg.Window {
		a.sums = a.sums.minus(a.accepted[a.head])
		a.head++
	}
	for a.reqHead < len(a.requests) && now.Sub(a.requests[a.reqHead]) >= a.cfg.Window {
		a.reqHead++
	}
}

// misfit returns the limits call, arriving at call.At, does not fit in
// the window, and how long until it would fit them all; zero when it fits.
func (a *API) misfit(call Record) (rej Rejection, retry time.Duration) {
	now := call.At
	if reqs := a.requests[a.reqHead:]; len(reqs)+1 > a.cfg.Requests {
		rej.Requests = true
		retry = reqs[len(reqs)-a.cfg.Requests].Add(a.cfg.Window).Sub(now)
	}
	fits := func(limit int, of func(Record) int) bool {
		need := of(a.sums) + of(call) - limit
		if need <= 0 {
			return true
		}
		// The call fits once the oldest calls holding need have left.
		for _, c := range a.accepted[a.head:] {
			if need -= of(c); need <= 0 {
				retry = max(retry, c.At.Add(a.cfg.Window).Sub(now))
				break
			}
		}
		return false
	}
	if a.cfg.Accounting == Anthropic {
		rej.Input = !fits(a.cfg.InputTokens, func(r Record) int { return r.Input })
		rej.Output = !fits(a.cfg.OutputTokens, func(r Record) int { return r.Output })
	} else {
		rej.Tokens = !fits(a.cfg.Tokens, func(r Record) int { return r.Tokens })
	}
	if !rej.Tokens && !rej.Input && !rej.Output && !rej.Requests {
		return Rejection{}, 0
	}
	rej.At = now
	return rej, max(retry, time.Nanosecond)
}

// end adjusts the call at index i to its completion, once: its answer is
// written. With Strict, its count stays.
func (a *API) end(i, completion int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := &a.accepted[i]
	if c.Done {
		return
	}
	if a.cfg.Strict {
		c.Done = true
		return
	}
	was := *c
	c.Output, c.Tokens, c.Done = completion, c.Input+completion, true
	if i >= a.head {
		a.sums = a.sums.minus(was).plus(*c)
	}
}

func (r Record) plus(c Record) Record {
	r.Tokens, r.Input, r.Output = r.Tokens+c.Tokens, r.Input+c.Input, r.Output+c.Output
	return r
}

func (r Record) minus(c Record) Record {
	r.Tokens, r.Input, r.Output = r.Tokens-c.Tokens, r.Input-c.Input, r.Output-c.Output
	return r
}

// headers returns the rate-limit headers of a response written at now,
// as the Accounting's vendor states them (none for Metered).
func (a *API) headers(now time.Time) map[string]string {
	reqs := a.requests[a.reqHead:]
	emptyAt := func(arrivals []time.Time) time.Time { // when the window will hold none of them
		if len(arrivals) == 0 {
			return now
		}
		return arrivals[len(arrivals)-1].Add(a.cfg.Window)
	}
	var calls []time.Time
	for _, c := range a.accepted[a.head:] {
		calls = append(calls, c.At)
	}
	reqReset, tokReset := emptyAt(reqs), emptyAt(calls)
	h := map[string]string{}
	switch a.cfg.Accounting {
	case OpenAI:
		d := func(at time.Time) string { return at.Sub(now).Round(time.Millisecond).String() }
		h["X-Ratelimit-Limit-Requests"] = strconv.Itoa(a.cfg.Requests)
		h["X-Ratelimit-Limit-Tokens"] = strconv.Itoa(a.cfg.Tokens)
		h["X-Ratelimit-Remaining-Requests"] = strconv.Itoa(max(0, a.cfg.Requests-len(reqs)))
		h["X-Ratelimit-Remaining-Tokens"] = strconv.Itoa(max(0, a.cfg.Tokens-a.sums.Tokens))
		h["X-Ratelimit-Reset-Requests"] = d(reqReset)
		h["X-Ratelimit-Reset-Tokens"] = d(tokReset)
	case Anthropic:
		at := func(t time.Time) string { // RFC 3339, whole seconds, rounded up
			if u := t.Truncate(time.Second); u.Before(t) {
				t = u.Add(time.Second)
			}
			return t.UTC().Format(time.RFC3339)
		}
		set := func(name string, limit, remaining int, reset time.Time) {
			h["Anthropic-Ratelimit-"+name+"-Limit"] = strconv.Itoa(limit)
			h["Anthropic-Ratelimit-"+name+"-Remaining"] = strconv.Itoa(max(0, remaining))
			h["Anthropic-Ratelimit-"+name+"-Reset"] = at(reset)
		}
		set("Requests", a.cfg.Requests, a.cfg.Requests-len(reqs), reqReset)
		in, out := a.cfg.InputTokens-a.sums.Input, a.cfg.OutputTokens-a.sums.Output
		set("Input-Tokens", a.cfg.InputTokens, in, tokReset)
		set("Output-Tokens", a.cfg.OutputTokens, out, tokReset)
		if in*a.cfg.OutputTokens <= out*a.cfg.InputTokens { // the more restrictive, by the share left
			set("Tokens", a.cfg.InputTokens, in, tokReset)
		} else {
			set("Tokens", a.cfg.OutputTokens, out, tokReset)
		}
	}
	return h
}

// streamChunks is how many content events a streamed answer has (fewer
// when the completion has fewer tokens).
const streamChunks = 4

// stream writes u's completion as server-sent events, the usage last,
// the call's count adjusted to it just before.
func (a *API) stream(w http.ResponseWriter, r *http.Request, v verdict, u Usage) {
	id := v.id
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
	a.end(v.index, v.completion)
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
	return body.promptTokens(), body.MaxTokens
}

// ParseUsage reads a call's usage from the end of its response body, as a
// client of the API would: the "usage" of a JSON answer (in OpenAI's shape
// or Anthropic's), or of the last event of a streamed one that has it. It reports false when tail
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
	// RejectedTokens, RejectedInput, RejectedOutput and RejectedRequests
	// count the 429s by the limit they did not fit (a call may fit none).
	RejectedTokens, RejectedInput, RejectedOutput, RejectedRequests int
	// Tokens is the accepted calls' tokens, as they count now (a call
	// still running counts its max_tokens under the OpenAI and Anthropic
	// accountings, and with Strict every call does).
	Tokens int
	// MaxTokensInWindow, MaxInputInWindow, MaxOutputInWindow and
	// MaxRequestsInWindow are the most tokens, input tokens, output
	// tokens and calls accepted in any half-open window of length Window,
	// as the calls count now: never above the limits, for the API refuses
	// what would be (and a call's count only goes down once it ends).
	MaxTokensInWindow, MaxInputInWindow, MaxOutputInWindow, MaxRequestsInWindow int
	TokenLimit, InputLimit, OutputLimit, RequestLimit                           int
	Window                                                                      time.Duration
}

// Stats returns the run's figures so far.
func (a *API) Stats() Stats {
	acc, rej := a.Accepted(), a.Rejections()
	s := Stats{Accepted: len(acc), Rejected: len(rej), TokenLimit: a.cfg.Tokens, InputLimit: a.cfg.InputTokens,
		OutputLimit: a.cfg.OutputTokens, RequestLimit: a.cfg.Requests, Window: a.cfg.Window}
	for _, r := range rej {
		for _, c := range []struct {
			did bool
			n   *int
		}{{r.Tokens, &s.RejectedTokens}, {r.Input, &s.RejectedInput}, {r.Output, &s.RejectedOutput}, {r.Requests, &s.RejectedRequests}} {
			if c.did {
				*c.n++
			}
		}
	}
	i := 0
	var sum Record
	for j, c := range acc {
		s.Tokens += c.Tokens
		sum = sum.plus(c)
		for c.At.Sub(acc[i].At) >= a.cfg.Window {
			sum = sum.minus(acc[i])
			i++
		}
		s.MaxTokensInWindow = max(s.MaxTokensInWindow, sum.Tokens)
		s.MaxInputInWindow = max(s.MaxInputInWindow, sum.Input)
		s.MaxOutputInWindow = max(s.MaxOutputInWindow, sum.Output)
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
