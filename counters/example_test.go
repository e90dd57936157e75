package counters_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/go-throttler/throttler/counters"
)

// GitHub's Counters read a refusal with its primary counter at zero as a
// pause of every replica until the counter resets.
func ExampleGitHub() {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	resp := &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{}}
	resp.Header.Set("X-RateLimit-Resource", "core")
	resp.Header.Set("X-RateLimit-Remaining", "0")
	resp.Header.Set("X-RateLimit-Reset", fmt.Sprint(now.Add(90*time.Second).Unix()))

	q := counters.GitHub().Read(resp, nil, now)
	fmt.Println(q.Verdict, q.Bucket, q.Remaining, q.Until.Sub(now))
	// Output: pause core 0 1m30s
}

// Stripe's lock timeouts concern the one call whose object is locked: it
// alone is sent again, and nobody pauses.
func ExampleStripe() {
	resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
	body := []byte(`{"error": {"code": "lock_timeout", "message": "Object is locked"}}`)

	c := counters.Stripe()
	fmt.Println(c.Peek(resp), c.Read(resp, body, time.Now()).Verdict)
	// Output: true retry-call
}

// Google's APIs state a refusal's wait in the body's RetryInfo, which
// Google's Counters read (the Transport reads the body ahead and hands it
// on whole), with the quota the refusal names.
func ExampleGoogle() {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
	body := []byte(`{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
	  {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}]},
	  {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}]}}`)

	c := counters.Google()
	q := c.Read(resp, body, now)
	fmt.Println(c.Peek(resp), q.Verdict, q.Until.Sub(now), q.Bucket)
	// Output: true pause 37s GenerateRequestsPerMinutePerProjectPerModel
}
