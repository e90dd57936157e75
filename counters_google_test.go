package throttler

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler/counters"
)

// googleRefusal is a Gemini API 429 whose RetryInfo asks for delay, as the
// API documents its errors, with a message that runs on past what the
// Transport reads ahead.
func googleRefusal(delay string) string {
	return `{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
    {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}]},
    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "` + delay + `"}],
  "message": "You exceeded your current quota.` + strings.Repeat(" ", 2*counters.PeekBytes) + `"}}`
}

// A Google 429 states its wait in the body's RetryInfo: with
// counters.Google, the replica that read it hands the caller the body
// whole and every replica pauses until then. (The body runs on past the
// bytes read ahead: JSON cannot parse them, and they are searched for the
// RetryInfo's delay.)
func TestGoogleRetryInfoPausesEveryReplica(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		refusal := googleRefusal("1.2s")
		api := &scriptedAPI{answers: []scripted{
			{status: 429, headers: map[string]string{"Content-Type": "application/json"}, body: refusal},
			{status: 200},
		}}
		p := twoReplicas(t, dial, key, api, counters.Google())
		code, body := do(t, p.ca, p.url)
		read := time.Now()
		if code != 429 || body != refusal {
			t.Fatalf("a got %d and %d bytes, want the 429 and its %d bytes", code, len(body), len(refusal))
		}
		p.assertPausedB(t, api, read, 1100*time.Millisecond) // RetryInfo: 1.2s
	})
}

// With Retries, the call refused is sent again once the RetryInfo's delay
// has passed, and the caller sees only the answer to that.
func TestGoogleRetryInfoRetries(t *testing.T) {
	api := &scriptedAPI{answers: []scripted{
		{status: 429, body: googleRefusal("0.3s")},
		{status: 200, body: "ok"},
	}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	th := miniThrottler(t, 100, time.Second)
	c := &http.Client{Transport: &Transport{Base: srv.Client().Transport, Route: th.Route(), Counters: counters.Google(), Retries: 1}}
	if code, body := do(t, c, srv.URL); code != 200 || body != "ok" {
		t.Fatalf("got %d %q, want the retry's 200", code, body)
	}
	got := api.got()
	if len(got) != 2 {
		t.Fatalf("%d requests, want 2", len(got))
	}
	if gap := got[1].Sub(got[0]); gap < 250*time.Millisecond {
		t.Errorf("the retry came %s after the refusal, want at least its 0.3s RetryInfo (less the clock's allowance)", gap)
	}
	waitIdle(t, th)
}
