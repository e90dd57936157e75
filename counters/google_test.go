package counters

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// geminiRefusal is a 429 as the Gemini API answers it when a quota per
// minute runs out: QuotaFailure, Help and RetryInfo details.
const geminiRefusal = `{
  "error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details.",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
          {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
            "quotaDimensions": {"location": "global", "model": "gemini-2.0-flash"},
            "quotaValue": "15"
          }
        ]
      },
      {
        "@type": "type.googleapis.com/google.rpc.Help",
        "links": [{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]
      },
      {
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": "37s"
      }
    ]
  }
}`

// The bodies follow Google's API design guide on errors (AIP-193) and the
// Gemini API's 429: the delay in RetryInfo, the quota in QuotaFailure or
// ErrorInfo; a Retry-After header first; 403s told apart by reason.
func TestGoogleCounters(t *testing.T) {
	quotaID := "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
	cloudRefusal := `{"error": {"code": 429, "message": "Quota exceeded for quota metric 'Read requests'", "status": "RESOURCE_EXHAUSTED",
	  "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
	    "metadata": {"quota_limit": "ReadRequestsPerMinutePerUser", "quota_metric": "sheets.googleapis.com/read_requests", "service": "sheets.googleapis.com"}},
	    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.250s"}]}}`
	driveRefusal := `{"error": {"code": 403, "message": "User Rate Limit Exceeded", "errors": [{"domain": "usageLimits", "reason": "userRateLimitExceeded", "message": "User Rate Limit Exceeded"}]}}`
	permission := `{"error": {"code": 403, "message": "The caller does not have permission", "status": "PERMISSION_DENIED"}}`
	unavailable := `{"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE",
	  "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}]}}`
	runPresetCases(t, Google(), presetNow, []presetCase{
		{name: "gemini 429", status: 429, body: geminiRefusal, peek: true,
			want: Quota{Verdict: Pause, Until: presetNow.Add(37 * time.Second), Bucket: quotaID}},
		{name: "gemini 429 in an array", status: 429, body: "[" + geminiRefusal + "]", peek: true,
			want: Quota{Verdict: Pause, Until: presetNow.Add(37 * time.Second), Bucket: quotaID}},
		{name: "Retry-After first", status: 429, headers: map[string]string{"Retry-After": "10"}, body: geminiRefusal, peek: true,
			want: Quota{Verdict: Pause, Until: presetNow.Add(10 * time.Second), Bucket: quotaID}},
		{name: "cloud 429, ErrorInfo", status: 429, body: cloudRefusal, peek: true,
			want: Quota{Verdict: Pause, Until: presetNow.Add(250 * time.Millisecond), Bucket: "ReadRequestsPerMinutePerUser"}},
		{name: "429 stating no delay", status: 429, body: `{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED"}}`, peek: true,
			want: Quota{}},
		{name: "503 with RetryInfo", status: 503, body: unavailable, peek: true,
			want: Quota{Verdict: Pause, Until: presetNow.Add(1500 * time.Millisecond)}},
		{name: "503 stating nothing", status: 503, body: `upstream connect error`, peek: true, want: Quota{}},
		{name: "403 rate limit, older API", status: 403, body: driveRefusal, peek: true, want: Quota{Verdict: Pause}},
		{name: "403 RESOURCE_EXHAUSTED with delay", status: 403, body: strings.Replace(geminiRefusal, "429", "403", 1), peek: true,
			want: Quota{Verdict: Pause, Until: presetNow.Add(37 * time.Second), Bucket: quotaID}},
		{name: "403 permission", status: 403, body: permission, peek: true, want: Quota{}},
		{name: "200", status: 200, want: Quota{}},
		{name: "body cut short", status: 429, body: geminiRefusal[:strings.Index(geminiRefusal, `"37s"`)+5], peek: true,
			want: Quota{Verdict: Pause, Until: presetNow.Add(37 * time.Second)}},
	})
}

// A body that is no JSON at all, or a RetryInfo whose delay does not
// parse, states no delay: the refusal is left to the Transport's back-off.
func TestGoogleCountersMalformed(t *testing.T) {
	for _, body := range []string{"", "<html>Too Many Requests</html>", `{"error": "quota"}`, `[]`, `[1]`,
		`{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "-3s"}]}}`,
		`{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "soon"}]}}`,
		`{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo"}, {"@type": ""}, {}]}}`} {
		resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
		if q := Google().Read(resp, []byte(body), presetNow); q.Verdict != Proceed || !q.Until.IsZero() {
			t.Errorf("Read(429, %q) = %+v, want no pause of its own", body, q)
		}
	}
}

func TestParseProtoDuration(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"37s": 37 * time.Second, "0.5s": 500 * time.Millisecond, "1.000340012s": 1000340012 * time.Nanosecond,
		"0s": 0, " 2s ": 2 * time.Second, "100000s": 24 * time.Hour, "99999999999999999999s": 24 * time.Hour,
	} {
		if got, ok := parseProtoDuration(v); !ok || got != want {
			t.Errorf("parseProtoDuration(%q) = %s, %v; want %s", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "s", "37", "-1s", "+1s", "1m", "NaNs", "1e400s", "1.s", ".5s", "1.0000000001s", "1 s"} {
		if got, ok := parseProtoDuration(v); ok {
			t.Errorf("parseProtoDuration(%q) = %s, true; want false", v, got)
		}
	}
}
