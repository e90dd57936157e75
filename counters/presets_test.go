package counters

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

// presetCase is one response and what a preset must read from it.
type presetCase struct {
	name    string
	status  int
	headers map[string]string
	body    string
	want    Quota
	peek    bool // whether the preset asks for the body
}

func runPresetCases(t *testing.T, c Counters, now time.Time, cases []presetCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tc.status, Header: http.Header{}}
			for k, v := range tc.headers {
				resp.Header.Add(k, v)
			}
			if got := c.Peek(resp); got != tc.peek {
				t.Errorf("Peek(status %d) = %v, want %v", tc.status, got, tc.peek)
			}
			var body []byte
			if tc.peek {
				body = []byte(tc.body)
			}
			got := c.Read(resp, body, now)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Read(status %d, %v, %q)\n got %+v\nwant %+v", tc.status, tc.headers, tc.body, got, tc.want)
			}
		})
	}
}

var presetNow = time.Date(2024, 8, 20, 12, 0, 0, 0, time.UTC)

// The header examples follow GitHub's documentation on REST rate limits
// (x-ratelimit-* on every response; 403 or 429 for the primary limit with
// remaining 0; secondary limits with retry-after, with remaining 0, or
// with neither and a message saying so).
func TestGitHubCounters(t *testing.T) {
	reset := presetNow.Add(30 * time.Minute)
	epoch := "1724157000" // reset, in UTC epoch seconds
	if got := reset.Unix(); got != 1724157000 {
		t.Fatalf("fixture: reset is %d", got)
	}
	core := func(remaining string) map[string]string {
		return map[string]string{"x-ratelimit-limit": "5000", "x-ratelimit-remaining": remaining,
			"x-ratelimit-used": "1", "x-ratelimit-reset": epoch, "x-ratelimit-resource": "core"}
	}
	with := func(h map[string]string, k, v string) map[string]string {
		out := map[string]string{}
		for a, b := range h {
			out[a] = b
		}
		out[k] = v
		return out
	}
	search := map[string]string{"x-ratelimit-limit": "30", "x-ratelimit-remaining": "0",
		"x-ratelimit-reset": epoch, "x-ratelimit-resource": "search"}
	runPresetCases(t, GitHub(), presetNow, []presetCase{
		{name: "ok", status: 200, headers: core("4999"),
			want: Quota{Bucket: "core", Remaining: 4999, Reset: reset.Local()}},
		{name: "primary exhausted", status: 403, peek: true, headers: core("0"),
			body: `{"message":"API rate limit exceeded for user ID 1.","documentation_url":"..."}`,
			want: Quota{Verdict: Pause, Until: reset.Local(), Bucket: "core", Remaining: 0, Reset: reset.Local()}},
		{name: "primary exhausted 429", status: 429, peek: true, headers: core("0"),
			want: Quota{Verdict: Pause, Until: reset.Local(), Bucket: "core", Remaining: 0, Reset: reset.Local()}},
		{name: "secondary with retry-after", status: 403, peek: true, headers: with(core("4000"), "retry-after", "60"),
			body: `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`,
			want: Quota{Verdict: Pause, Until: presetNow.Add(time.Minute), Bucket: "core", Remaining: 4000, Reset: reset.Local()}},
		{name: "secondary with neither", status: 403, peek: true, headers: core("4000"),
			body: `{"message":"You have exceeded a secondary rate limit and have been temporarily blocked from content creation. Please retry your request again later."}`,
			want: Quota{Verdict: Pause, Backoff: time.Minute, Bucket: "core", Remaining: 4000, Reset: reset.Local()}},
		{name: "secondary, older wording", status: 403, peek: true,
			body: `{"message":"You have triggered an abuse detection mechanism. Please wait a few minutes before you try again."}`,
			want: Quota{Verdict: Pause, Backoff: time.Minute}},
		{name: "forbidden, no quota", status: 403, peek: true, headers: core("4990"),
			body: `{"message":"Resource not accessible by integration"}`,
			want: Quota{Bucket: "core", Remaining: 4990, Reset: reset.Local()}},
		{name: "another resource", status: 403, peek: true, headers: search,
			want: Quota{Bucket: "search"}},
		{name: "503 with retry-after", status: 503, headers: map[string]string{"Retry-After": "5"},
			want: Quota{Verdict: Pause, Until: presetNow.Add(5 * time.Second)}},
		{name: "bad reset", status: 200, headers: with(core("10"), "x-ratelimit-reset", "soon"),
			want: Quota{Bucket: "core"}},
	})
	runPresetCases(t, GitHub("search"), presetNow, []presetCase{
		{name: "search followed", status: 403, peek: true, headers: search,
			want: Quota{Verdict: Pause, Until: reset.Local(), Bucket: "search", Remaining: 0, Reset: reset.Local()}},
		{name: "core not followed", status: 200, headers: core("4999"), want: Quota{Bucket: "core"}},
	})
}

// OpenAI's rate-limit guide: x-ratelimit-{limit,remaining,reset}-{requests,
// tokens}, resets as durations.
func TestOpenAICounters(t *testing.T) {
	h := func(remReq, resetReq, remTok, resetTok string) map[string]string {
		return map[string]string{"x-ratelimit-limit-requests": "60", "x-ratelimit-limit-tokens": "150000",
			"x-ratelimit-remaining-requests": remReq, "x-ratelimit-reset-requests": resetReq,
			"x-ratelimit-remaining-tokens": remTok, "x-ratelimit-reset-tokens": resetTok}
	}
	runPresetCases(t, OpenAI(), presetNow, []presetCase{
		{name: "ok", status: 200, headers: h("59", "1s", "149984", "6m0s"),
			want: Quota{Remaining: 59, Reset: presetNow.Add(time.Second), Gradual: true}},
		{name: "milliseconds", status: 200, headers: h("4999", "12ms", "159976", "9ms"),
			want: Quota{Remaining: 4999, Reset: presetNow.Add(12 * time.Millisecond), Gradual: true}},
		{name: "429 with retry-after", status: 429, headers: func() map[string]string {
			m := h("0", "20s", "1000", "1s")
			m["retry-after"] = "20"
			return m
		}(),
			want: Quota{Verdict: Pause, Until: presetNow.Add(20 * time.Second), Remaining: 0, Reset: presetNow.Add(20 * time.Second), Gradual: true}},
		{name: "429, tokens exhausted", status: 429, headers: h("10", "50s", "0", "6m0s"),
			want: Quota{Verdict: Pause, Until: presetNow.Add(6 * time.Minute), Remaining: 10, Reset: presetNow.Add(50 * time.Second), Gradual: true}},
		{name: "429, requests at zero", status: 429, headers: h("0", "50s", "100", "1s"),
			want: Quota{Remaining: 0, Reset: presetNow.Add(50 * time.Second), Gradual: true}},
		{name: "429, no hint", status: 429, headers: h("10", "50s", "100", "1s"),
			want: Quota{Remaining: 10, Reset: presetNow.Add(50 * time.Second), Gradual: true}},
		{name: "bad duration", status: 200, headers: h("59", "soon", "1", "1s"),
			want: Quota{Gradual: true}},
	})
}

// Anthropic's rate-limit documentation: anthropic-ratelimit-* with resets
// in RFC 3339, retry-after on 429.
func TestAnthropicCounters(t *testing.T) {
	at := "2024-08-20T12:00:30Z"
	h := func(remReq, remTok string) map[string]string {
		return map[string]string{"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": remReq,
			"anthropic-ratelimit-requests-reset": at, "anthropic-ratelimit-tokens-limit": "40000",
			"anthropic-ratelimit-tokens-remaining": remTok, "anthropic-ratelimit-tokens-reset": "2024-08-20T12:00:45Z"}
	}
	reset := presetNow.Add(30 * time.Second)
	runPresetCases(t, Anthropic(), presetNow, []presetCase{
		{name: "ok", status: 200, headers: h("49", "39000"), want: Quota{Remaining: 49, Reset: reset, Gradual: true}},
		{name: "429 with retry-after", status: 429, headers: func() map[string]string {
			m := h("0", "39000")
			m["retry-after"] = "5"
			return m
		}(), want: Quota{Verdict: Pause, Until: presetNow.Add(5 * time.Second), Remaining: 0, Reset: reset, Gradual: true}},
		{name: "429, tokens exhausted", status: 429, headers: h("3", "0"),
			want: Quota{Verdict: Pause, Until: presetNow.Add(45 * time.Second), Remaining: 3, Reset: reset, Gradual: true}},
		{name: "offset time", status: 200, headers: func() map[string]string {
			m := h("7", "1")
			m["anthropic-ratelimit-requests-reset"] = "2024-08-20T14:00:30+02:00"
			return m
		}(), want: Quota{Remaining: 7, Reset: time.Date(2024, 8, 20, 14, 0, 30, 0, time.FixedZone("", 7200)), Gradual: true}},
	})
}

// The IETF draft's RateLimit field (revision 10's examples), and the
// RateLimit-Remaining and RateLimit-Reset of its earlier revisions.
func TestIETFCounters(t *testing.T) {
	runPresetCases(t, IETF(), presetNow, []presetCase{
		{name: "one policy", status: 200, headers: map[string]string{"RateLimit": `"default";r=50;t=30`},
			want: Quota{Bucket: "default", Remaining: 50, Reset: presetNow.Add(30 * time.Second)}},
		{name: "first of several", status: 200, headers: map[string]string{"RateLimit": `"permin";r=10;t=20, "perhr";r=900;t=2000`},
			want: Quota{Bucket: "permin", Remaining: 10, Reset: presetNow.Add(20 * time.Second)}},
		{name: "no reset", status: 200, headers: map[string]string{"RateLimit": `"default";r=999;pk=:dHJpYWwxMjEzMjM=:`}},
		{name: "earlier drafts", status: 200, headers: map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "5", "RateLimit-Reset": "12"},
			want: Quota{Remaining: 5, Reset: presetNow.Add(12 * time.Second)}},
		{name: "429 at zero", status: 429, headers: map[string]string{"RateLimit": `"default";r=0;t=10`},
			want: Quota{Verdict: Pause, Until: presetNow.Add(10 * time.Second), Bucket: "default", Remaining: 0, Reset: presetNow.Add(10 * time.Second)}},
		{name: "429 with retry-after", status: 429, headers: map[string]string{"RateLimit": `"default";r=0;t=10`, "Retry-After": "3"},
			want: Quota{Verdict: Pause, Until: presetNow.Add(3 * time.Second), Bucket: "default", Remaining: 0, Reset: presetNow.Add(10 * time.Second)}},
	})
	runPresetCases(t, IETF("perhr"), presetNow, []presetCase{
		{name: "named policy", status: 200, headers: map[string]string{"RateLimit": `"permin";r=10;t=20, "perhr";r=900;t=2000`},
			want: Quota{Bucket: "perhr", Remaining: 900, Reset: presetNow.Add(2000 * time.Second)}},
	})
}

// Stripe's lock timeouts are 429s that concern one object: retry that
// call, pause no one.
func TestStripeCounters(t *testing.T) {
	lock := `{
  "error": {
    "code": "lock_timeout",
    "doc_url": "https://stripe.com/docs/error-codes/lock-timeout",
    "message": "This object cannot be accessed right now because another API request or Stripe process is currently accessing it.",
    "type": "invalid_request_error"
  }
}`
	runPresetCases(t, Stripe(), presetNow, []presetCase{
		{name: "lock timeout", status: 429, peek: true, body: lock, want: Quota{Verdict: RetryCall}},
		{name: "lock timeout, cut short", status: 429, peek: true, body: lock[:60], want: Quota{Verdict: RetryCall}},
		{name: "rate limited", status: 429, peek: true, body: `{"error":{"message":"Too many requests hit the API too quickly.","type":"invalid_request_error"}}`},
		{name: "rate limited with retry-after", status: 429, peek: true, headers: map[string]string{"Retry-After": "2"},
			want: Quota{Verdict: Pause, Until: presetNow.Add(2 * time.Second)}},
		{name: "ok", status: 200},
	})
}

func TestStructuredFieldList(t *testing.T) {
	items := sfList([]string{`"a,b";r=1;t=2, tok;r="x;y", "e\"q";flag`, `second;r=3`})
	want := []sfItem{
		{name: "a,b", params: map[string]string{"r": "1", "t": "2"}},
		{name: "tok", params: map[string]string{"r": "x;y"}},
		{name: `e"q`, params: map[string]string{"flag": "?1"}},
		{name: "second", params: map[string]string{"r": "3"}},
	}
	if !reflect.DeepEqual(items, want) {
		t.Fatalf("sfList:\n got %+v\nwant %+v", items, want)
	}
	for _, v := range []string{"", "-", "12345678901234567", "1.5"} {
		if n, ok := sfInt(v); ok {
			t.Errorf("sfInt(%q) = %d, true; want false", v, n)
		}
	}
}

// TestResetReadings: a reset stated as NaN or infinite seconds is no
// reading, and the IETF drafts' RateLimit-Reset sent as an epoch second
// (as many servers do) is read as that time, not as a delta.
func TestResetReadings(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, v := range []string{"NaN", "Inf", "-Inf"} {
		if _, ok := parseResetDuration(v, now); ok {
			t.Errorf("parseResetDuration(%q) read a reset", v)
		}
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{}}
	resp.Header.Set("RateLimit-Remaining", "7")
	resp.Header.Set("RateLimit-Reset", "1700000060")
	q := IETF().Read(resp, nil, now)
	if !q.Reset.Equal(now.Add(time.Minute)) || q.Remaining != 7 {
		t.Fatalf("epoch RateLimit-Reset read as reset %s remaining %d, want a minute on and 7", q.Reset.Sub(now), q.Remaining)
	}
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"3", 3 * time.Second, true},
		{" 0 ", 0, true},
		{"-1", 0, false},
		{"", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, false},
		{"99999999999", 24 * time.Hour, true},
	} {
		got, ok := RetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("RetryAfter(%q) = (%s, %v), want (%s, %v)", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
