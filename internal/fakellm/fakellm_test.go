package fakellm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is a manual clock for an API.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// call sends one request to h and returns the recorded response.
func call(t *testing.T, h http.Handler, prompt string, maxTokens int, stream bool) *httptest.ResponseRecorder {
	t.Helper()
	body, _ := json.Marshal(Request{Prompt: prompt, MaxTokens: maxTokens, Stream: stream})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, strings.NewReader(string(body))))
	return rec
}

func prompt(words int) string { return strings.TrimSpace(strings.Repeat("w ", words)) }

func TestPromptTokens(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
	}{{"", 0}, {"   ", 0}, {"one", 1}, {"  two  words ", 2}, {"a\tb\nc", 3}} {
		if got := PromptTokens(tt.in); got != tt.want {
			t.Errorf("PromptTokens(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

// TestTokenLimit: calls of 11 tokens each (10 words, max_tokens 1) against
// 100 tokens a minute.
func TestTokenLimit(t *testing.T) {
	c := &clock{now: t0}
	a := New(Config{Tokens: 100, Requests: 1000, Now: c.Now})
	for i := range 9 {
		if rec := call(t, a, prompt(10), 1, false); rec.Code != http.StatusOK {
			t.Fatalf("call %d: status %d, want 200", i, rec.Code)
		}
		c.Add(time.Second)
	}
	// 99 tokens in the window: 11 more do not fit until the first call
	// (at t0) has left, 60s after it: 51s from now.
	rec := call(t, a, prompt(10), 1, false)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "51" {
		t.Fatalf("10th call: status %d, Retry-After %q; want 429, 51", rec.Code, rec.Header().Get("Retry-After"))
	}
	// The refused call cost nothing, and the smallest call (2 tokens) does
	// not fit 99 either.
	if rec := call(t, a, prompt(1), 1, false); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("2-token call at 99/100: status %d, want 429", rec.Code)
	}
	c.Add(51 * time.Second) // the first call leaves the window
	if rec := call(t, a, prompt(10), 1, false); rec.Code != http.StatusOK {
		t.Fatalf("after the first call left: status %d, want 200", rec.Code)
	}
	s := a.Stats()
	if s.Accepted != 10 || s.Rejected != 2 || s.RejectedTokens != 2 || s.RejectedRequests != 0 || s.Tokens != 110 {
		t.Errorf("Stats = %+v; want 10 accepted, 2 rejected for tokens, 110 tokens", s)
	}
	if s.MaxTokensInWindow != 99 || s.MaxRequestsInWindow != 9 {
		t.Errorf("maxima %d tokens, %d requests; want 99, 9", s.MaxTokensInWindow, s.MaxRequestsInWindow)
	}
}

func TestRequestLimit(t *testing.T) {
	c := &clock{now: t0}
	a := New(Config{Tokens: 10000, Requests: 3, Window: 10 * time.Second, Now: c.Now})
	for i := range 3 {
		if rec := call(t, a, "hi", 5, false); rec.Code != http.StatusOK {
			t.Fatalf("call %d: status %d, want 200", i, rec.Code)
		}
		c.Add(1500 * time.Millisecond)
	}
	// The first call leaves at 10s; it is 4.5s now: 5.5s, rounded up to 6.
	rec := call(t, a, "hi", 5, false)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "6" {
		t.Fatalf("4th call: status %d, Retry-After %q; want 429, 6", rec.Code, rec.Header().Get("Retry-After"))
	}
	c.Add(5500 * time.Millisecond)
	if rec := call(t, a, "hi", 5, false); rec.Code != http.StatusOK {
		t.Fatalf("at 10s: status %d, want 200", rec.Code)
	}
	if s := a.Stats(); s.RejectedRequests != 1 || s.RejectedTokens != 0 || s.MaxRequestsInWindow != 3 {
		t.Errorf("Stats = %+v; want 1 rejected for requests, max 3 requests in a window", s)
	}
}

func TestBadRequests(t *testing.T) {
	a := New(Config{Tokens: 100})
	for _, tt := range []struct {
		name   string
		prompt string
		max    int
	}{{"empty prompt", " ", 5}, {"max_tokens 0", "hi", 0}, {"never fits", prompt(50), 51}} {
		if rec := call(t, a, tt.prompt, tt.max, false); rec.Code != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", tt.name, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, strings.NewReader("{")))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("malformed body: status %d, want 400", rec.Code)
	}
	if s := a.Stats(); s.Accepted+s.Rejected != 0 {
		t.Errorf("bad requests were recorded: %+v", s)
	}
}

// TestCompletionLengths: in [1, max_tokens], the same for the same seed.
func TestCompletionLengths(t *testing.T) {
	lengths := func(seed uint64) []int {
		a := New(Config{Tokens: 1 << 30, Requests: 1 << 30, Seed: seed})
		var out []int
		for range 200 {
			u, ok := ParseUsage(call(t, a, "a b c", 7, false).Body.Bytes())
			if !ok || u.PromptTokens != 3 || u.CompletionTokens < 1 || u.CompletionTokens > 7 || u.TotalTokens != 3+u.CompletionTokens {
				t.Fatalf("usage %+v (ok %v); want 3 prompt tokens and 1..7 completion tokens", u, ok)
			}
			out = append(out, u.CompletionTokens)
		}
		return out
	}
	a, b, c := lengths(1), lengths(1), lengths(2)
	seen := map[int]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 1 twice: call %d got %d and %d", i, a[i], b[i])
		}
		seen[a[i]] = true
	}
	if len(seen) != 7 {
		t.Errorf("200 draws in 1..7 took %d distinct values, want 7", len(seen))
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 1 and 2 drew the same lengths")
	}
}

// TestStream: over a real HTTP server, each chunk arrives as an SSE event,
// the usage comes in the last event before [DONE], and the chunks' words
// add up to the completion tokens.
func TestStream(t *testing.T) {
	a := New(Config{Seed: 3, PerToken: time.Microsecond})
	srv := httptest.NewServer(a)
	defer srv.Close()
	body, _ := json.Marshal(Request{Prompt: "tell me a story", MaxTokens: 400, Stream: true})
	resp, err := http.Post(srv.URL+Path, "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q; want 200, text/event-stream", resp.StatusCode, ct)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not a data line", line)
		}
		events = append(events, data)
	}
	if !strings.HasSuffix(string(raw), "\n\n") {
		t.Errorf("the stream does not end with a blank line: %q", raw[max(0, len(raw)-20):])
	}
	if n := len(events); n < 3 || events[n-1] != "[DONE]" {
		t.Fatalf("events %q: want chunks, a usage event, then [DONE]", events)
	}
	var last struct {
		Choices []any
		Usage   *Usage
	}
	if err := json.Unmarshal([]byte(events[len(events)-2]), &last); err != nil || last.Usage == nil || len(last.Choices) != 0 {
		t.Fatalf("the event before [DONE] is %q: want no choices and a usage", events[len(events)-2])
	}
	words := 0
	for _, e := range events[:len(events)-2] {
		var chunk struct {
			Choices []struct{ Delta struct{ Content string } }
			Usage   *Usage
		}
		if err := json.Unmarshal([]byte(e), &chunk); err != nil || len(chunk.Choices) != 1 || chunk.Usage != nil {
			t.Fatalf("chunk %q: want one choice and no usage", e)
		}
		words += PromptTokens(chunk.Choices[0].Delta.Content)
	}
	u := *last.Usage
	if u.PromptTokens != 4 || words != u.CompletionTokens || u.TotalTokens != 4+words {
		t.Errorf("usage %+v, chunks of %d words; want 4 prompt tokens and the chunks' words as completion", u, words)
	}
	if got, ok := ParseUsage(raw); !ok || got != u {
		t.Errorf("ParseUsage(stream) = %+v, %v; want %+v", got, ok, u)
	}
	if s := a.Stats(); s.Tokens != u.TotalTokens {
		t.Errorf("the API counted %d tokens, the stream reported %d", s.Tokens, u.TotalTokens)
	}
}

func TestParseUsage(t *testing.T) {
	u := Usage{PromptTokens: 3, CompletionTokens: 5, TotalTokens: 8}
	j := `{"id":"x","choices":[{"message":{"content":"a b"}}],"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}` + "\n"
	sse := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5,\"total_tokens\":8}}\n\ndata: [DONE]\n\n"
	for _, tt := range []struct {
		name string
		tail string
		ok   bool
	}{
		{"json", j, true},
		{"sse", sse, true},
		{"sse, first event cut", sse[10:], true},
		{"json, cut", j[20:], false},
		{"sse without usage", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", false},
		{"json without usage", `{"choices":[]}`, false},
		{"empty", "", false},
	} {
		got, ok := ParseUsage([]byte(tt.tail))
		if ok != tt.ok || (ok && got != u) {
			t.Errorf("%s: ParseUsage = %+v, %v; want %+v, %v", tt.name, got, ok, u, tt.ok)
		}
	}
}

// TestMaximaNeverExceedLimits: random calls at random times; the maxima
// Stats reports match a brute-force count and never exceed the limits.
func TestMaximaNeverExceedLimits(t *testing.T) {
	c := &clock{now: t0}
	a := New(Config{Tokens: 500, Requests: 8, Window: time.Second, Seed: 9, Now: c.Now})
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		call(t, a, prompt(1+r.IntN(40)), 1+r.IntN(100), false)
		c.Add(time.Duration(r.IntN(80)) * time.Millisecond)
	}
	s := a.Stats()
	acc := a.Accepted()
	bestTok, bestReq := 0, 0
	for _, start := range acc {
		tok, req := 0, 0
		for _, x := range acc {
			if !x.At.Before(start.At) && x.At.Before(start.At.Add(time.Second)) {
				tok += x.Tokens
				req++
			}
		}
		bestTok, bestReq = max(bestTok, tok), max(bestReq, req)
	}
	if s.MaxTokensInWindow != bestTok || s.MaxRequestsInWindow != bestReq {
		t.Errorf("maxima %d tokens, %d requests; brute force %d, %d", s.MaxTokensInWindow, s.MaxRequestsInWindow, bestTok, bestReq)
	}
	if s.MaxTokensInWindow > 500 || s.MaxRequestsInWindow > 8 {
		t.Errorf("maxima %d tokens, %d requests exceed the limits 500, 8", s.MaxTokensInWindow, s.MaxRequestsInWindow)
	}
	if s.RejectedTokens == 0 || s.RejectedRequests == 0 || s.Accepted == 0 {
		t.Errorf("the load did not test both limits: %+v", s)
	}
}

func TestTokensBetween(t *testing.T) {
	c := &clock{now: t0}
	a := New(Config{Tokens: 1000, Requests: 100, Window: 10 * time.Second, Now: c.Now})
	// 11 tokens (10 words, 1 completion token) every second, from t0.
	for range 30 {
		call(t, a, prompt(10), 1, false)
		c.Add(time.Second)
	}
	for _, tt := range []struct{ from, to, want int }{{0, 30, 330}, {10, 20, 110}, {10, 10, 0}, {29, 40, 11}, {-5, 0, 0}} {
		if got := a.TokensBetween(t0.Add(time.Duration(tt.from)*time.Second), t0.Add(time.Duration(tt.to)*time.Second)); got != tt.want {
			t.Errorf("TokensBetween(%ds, %ds) = %d, want %d", tt.from, tt.to, got, tt.want)
		}
	}
}

func TestWorkloadAndAsked(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	streamed := 0
	for i := range 1000 {
		w := Workload(r)
		p := PromptTokens(w.Prompt)
		if p < 20 || p > 200 || (w.MaxTokens != 256 && w.MaxTokens != 512 && w.MaxTokens != 1024) {
			t.Fatalf("call %d: %d prompt tokens, max_tokens %d", i, p, w.MaxTokens)
		}
		if w.Stream {
			streamed++
		}
		body, _ := json.Marshal(w)
		req, _ := http.NewRequest(http.MethodPost, "http://api"+Path, bytes.NewReader(body))
		if gp, gm := Asked(req); gp != p || gm != w.MaxTokens {
			t.Fatalf("call %d: Asked = %d, %d; want %d, %d", i, gp, gm, p, w.MaxTokens)
		}
		if rest, _ := io.ReadAll(req.Body); !bytes.Equal(rest, body) {
			t.Fatalf("call %d: Asked touched the body that is sent", i)
		}
	}
	if streamed < 400 || streamed > 600 {
		t.Errorf("%d of 1000 calls streamed, want about half", streamed)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://api"+Path, io.NopCloser(strings.NewReader("{}")))
	if p, m := Asked(req); p != 0 || m != 0 {
		t.Errorf("Asked without GetBody = %d, %d; want zeros", p, m)
	}
}

// TestOpenAIAccounting: a running call counts its prompt plus max_tokens,
// an ended one its prompt plus completion, and a refused request counts
// against the request limit; every response states the counters.
func TestOpenAIAccounting(t *testing.T) {
	c := &clock{now: t0}
	a := New(Config{Accounting: OpenAI, Tokens: 1000, Requests: 3, Now: c.Now})
	first := a.admit(100, 500)
	if first.retry != 0 {
		t.Fatalf("first call refused: %+v", first)
	}
	if h := first.header; h["X-Ratelimit-Remaining-Tokens"] != "400" || h["X-Ratelimit-Remaining-Requests"] != "2" ||
		h["X-Ratelimit-Reset-Tokens"] != "1m0s" || h["X-Ratelimit-Limit-Tokens"] != "1000" {
		t.Fatalf("headers %v: want 400 tokens and 2 requests left, the window empty in 1m0s", h)
	}
	c.Add(time.Second)
	// 600 running (100 + max_tokens 500): another 600 does not fit.
	if v := a.admit(100, 500); v.retry != 59*time.Second {
		t.Fatalf("a second call while the first runs: retry %v, want refused until the first leaves (59s)", v.retry)
	}
	a.end(first.index, 50) // 150 now
	if v := a.admit(100, 500); v.retry != 0 {
		t.Fatalf("once the first ended at 150: refused (%v), want accepted", v.retry)
	}
	// 2 accepted and 1 refused request in the window: the 4th does not fit.
	v := a.admit(1, 1)
	if v.retry == 0 || v.header["X-Ratelimit-Remaining-Requests"] != "0" {
		t.Fatalf("4th request with a refused one in the window: %+v, want refused with no request left", v)
	}
	s := a.Stats()
	if s.Accepted != 2 || s.RejectedTokens != 1 || s.RejectedRequests != 1 || s.Tokens != 150+600 || s.MaxRequestsInWindow != 2 {
		t.Errorf("Stats = %+v; want 2 accepted (150 + 600 running), one 429 for tokens, one for requests", s)
	}
}

// TestStrict: with Strict, a call counts what it counted at its arrival
// for its whole window, ended or not: a call that did not fit while the
// first ran does not fit once it has ended, and fits once it has left the
// window.
func TestStrict(t *testing.T) {
	for acc, name := range map[Accounting]string{OpenAI: "OpenAI", Anthropic: "Anthropic"} {
		c := &clock{now: t0}
		a := New(Config{Accounting: acc, Strict: true, Tokens: 1000, InputTokens: 1000, OutputTokens: 500, Requests: 10, Now: c.Now})
		first := a.admit(100, 500)
		if first.retry != 0 {
			t.Fatalf("%s: first call refused: %+v", name, first)
		}
		c.Add(time.Second)
		a.end(first.index, 50)
		if v := a.admit(100, 500); v.retry != 59*time.Second {
			t.Fatalf("%s: a second call once the first ended at 50 tokens: retry %v, want refused until the first leaves (59s)", name, v.retry)
		}
		if got := a.Accepted()[0]; !got.Done || got.Output != 500 || got.Tokens != 600 {
			t.Fatalf("%s: the ended call counts %+v, want its max_tokens still (500 output, 600 in all)", name, got)
		}
		c.Add(59 * time.Second)
		if v := a.admit(100, 500); v.retry != 0 {
			t.Fatalf("%s: once the first has left the window: refused (%v), want accepted", name, v.retry)
		}
	}
}

// TestAnthropicAccounting: input and output tokens have their own limits,
// the output counts at max_tokens until the call ends; the headers state
// each counter with RFC 3339 resets, and a 429 has retry-after.
func TestAnthropicAccounting(t *testing.T) {
	c := &clock{now: t0.Add(300 * time.Millisecond)}
	a := New(Config{Accounting: Anthropic, InputTokens: 100, OutputTokens: 50, Requests: 10, Now: c.Now})
	first := a.admit(60, 40)
	if h := first.header; first.retry != 0 || h["Anthropic-Ratelimit-Output-Tokens-Remaining"] != "10" ||
		h["Anthropic-Ratelimit-Input-Tokens-Remaining"] != "40" || h["Anthropic-Ratelimit-Output-Tokens-Reset"] != "2024-01-01T00:01:01Z" ||
		h["Anthropic-Ratelimit-Tokens-Remaining"] != "10" || h["Anthropic-Ratelimit-Requests-Remaining"] != "9" {
		t.Fatalf("first call: %+v; want accepted, 40 input and 10 output tokens left, reset 00:01:01 (rounded up)", first)
	}
	if v := a.admit(30, 20); v.retry == 0 {
		t.Fatal("20 output tokens more while 40 of 50 run at max_tokens: accepted, want refused")
	}
	a.end(first.index, 5)
	if v := a.admit(30, 20); v.retry != 0 {
		t.Fatalf("once the first ended at 5 output tokens: refused (%v), want accepted", v.retry)
	}
	if v := a.admit(20, 1); v.retry == 0 {
		t.Fatal("110 input tokens of 100: accepted, want refused")
	}
	if s := a.Stats(); s.Accepted != 2 || s.RejectedOutput != 1 || s.RejectedInput != 1 || s.MaxInputInWindow != 90 || s.MaxOutputInWindow != 25 {
		t.Errorf("Stats = %+v; want 2 accepted, one 429 for output and one for input, at most 90 input and 25 output", s)
	}

	rec := call(t, a, prompt(20), 1, false) // input 110 again: refused
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" ||
		!strings.Contains(rec.Body.String(), `"rate_limit_error"`) || rec.Header().Get("Anthropic-Ratelimit-Requests-Limit") != "10" {
		t.Fatalf("a 429: status %d, headers %v, body %s", rec.Code, rec.Header(), rec.Body)
	}
	c.Add(time.Minute)
	rec = call(t, a, prompt(7), 9, false)
	u, ok := ParseUsage(rec.Body.Bytes())
	if rec.Code != http.StatusOK || !ok || u.InputTokens != 7 || u.OutputTokens < 1 || u.OutputTokens > 9 {
		t.Fatalf("status %d, usage %+v (%v); want 200, 7 input tokens and 1..9 output", rec.Code, u, ok)
	}
	if last := a.Accepted()[2]; !last.Done || last.Output != u.OutputTokens {
		t.Errorf("the API counts %+v once the usage is out, want its %d output tokens", last, u.OutputTokens)
	}
	if rec := call(t, a, "hi", 5, true); rec.Code != http.StatusBadRequest {
		t.Errorf("a stream in the Anthropic style: status %d, want 400", rec.Code)
	}
}

// TestMessagesBody: a request's messages count as its prompt.
func TestMessagesBody(t *testing.T) {
	a := New(Config{Accounting: OpenAI})
	body, _ := json.Marshal(Request{Messages: []Message{{"system", "be brief"}, {"user", "three more words"}}, MaxTokens: 4})
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, MessagesPath, bytes.NewReader(body)))
	u, ok := ParseUsage(rec.Body.Bytes())
	if rec.Code != http.StatusOK || !ok || u.PromptTokens != 5 {
		t.Fatalf("status %d, usage %+v; want 200 and 5 prompt tokens", rec.Code, u)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://api"+Path, bytes.NewReader(body))
	if p, m := Asked(req); p != 5 || m != 4 {
		t.Errorf("Asked = %d, %d; want 5, 4", p, m)
	}
}
