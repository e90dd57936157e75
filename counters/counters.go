// Package counters reads what an HTTP API says of its own quota on each
// response: the calls it will still take before its counter resets, and
// whether a response is a refusal that should pause every caller or one
// that concerns a single call. A throttler.Transport with Counters set
// follows what they read across every replica sharing the quota.
//
// The presets read the fields each vendor documents: GitHub, OpenAI,
// Anthropic, IETF, Stripe and Google (the RetryInfo in the body of a
// refusal by Gemini, Vertex AI or Google Cloud); Default reads only a
// 429's or 503's Retry-After. The package has no dependency beyond the standard library;
// it is the one home of the presets: a Transport takes them as
// Transport{Counters: counters.GitHub()}.
package counters

import (
	"net/http"
	"time"
)

// Counters reads what an API says of its own quota on each response: the
// calls it will still take before its counter resets, and whether the
// response is a refusal that should pause every replica, or one that
// concerns this call only. Our window sees only our own calls; when
// another consumer shares the account (a cron job, a person with the same
// token, a second service), the API's counter is the truth, and a
// throttler.Transport with Counters set follows it for every replica.
//
// The presets read the fields each vendor documents: GitHub, OpenAI,
// Anthropic, IETF (the RateLimit fields of the IETF httpapi draft, and
// the older RateLimit-Remaining and RateLimit-Reset), Stripe and Google. Write
// your own for other APIs. Implementations must be safe for concurrent
// use.
type Counters interface {
	// Peek reports whether Read needs the first bytes of resp's body, as
	// a refusal told apart by its message does (GitHub's secondary rate
	// limits, Stripe's lock timeouts). The Transport then reads up to
	// PeekBytes of the body before returning the response, and puts them
	// back in front of the rest: the caller reads the body unchanged.
	// Peek is asked of every response, so keep it to a look at the
	// status and headers.
	Peek(resp *http.Response) bool
	// Read returns what resp says, at now on the local clock. body holds
	// the first bytes of the body when Peek asked for them (fewer when
	// the body is shorter), else nil.
	Read(resp *http.Response, body []byte, now time.Time) Quota
}

// PeekBytes is how much of a response body a Transport reads ahead for
// Counters.Read, at most.
const PeekBytes = 8 << 10

// Verdict is what a response asks of the callers, as Counters read it.
type Verdict int

const (
	// Proceed: the response is no refusal for quota. What it says of
	// the API's counter (Quota.Remaining, Quota.Reset) is still followed.
	Proceed Verdict = iota
	// Pause: the API refused the call for its quota. Every replica pauses
	// until Quota.Until; when the response does not say until when
	// (Until is zero), every replica backs off for Transport.Backoff,
	// by default Quota.Backoff, or a second when that is zero, doubled
	// each time the API refuses again soon after a back-off (see
	// Transport.Backoff). With Retries, the call is sent again after the
	// pause.
	Pause
	// RetryCall: the call failed for a reason that is no quota and
	// concerns this call only, such as a lock on the object it changes
	// (Stripe's lock_timeout): nobody pauses, and with Retries the call
	// alone is sent again after a short wait.
	RetryCall
)

// String returns the verdict's name.
func (v Verdict) String() string {
	switch v {
	case Proceed:
		return "proceed"
	case Pause:
		return "pause"
	case RetryCall:
		return "retry-call"
	}
	return "verdict(?)"
}

// Quota is what one response says of the API's quota, as Counters read it.
type Quota struct {
	// Verdict is what the response asks of the callers.
	Verdict Verdict
	// Until is when a Pause ends, as the response states it (Retry-After,
	// or the reset of a counter at zero); zero when it does not say.
	Until time.Time
	// Backoff is, for a Pause whose Until is zero, the back-off the API
	// asks for (GitHub asks for a minute after a secondary rate limit):
	// the Transport's default, unless Transport.Backoff is set; zero
	// asks nothing.
	Backoff time.Duration
	// Bucket is the API's name for the counter stated, when it gives one
	// (GitHub's X-RateLimit-Resource, the IETF policy's name).
	Bucket string
	// Remaining is how many more calls the API takes before Reset,
	// counting every consumer of the account. It is meaningful only when
	// Reset is set.
	Remaining int
	// Reset is when the API's counter frees up: the end of its window,
	// or, for a counter that frees calls as they age (Gradual), the time
	// by which every call it now counts has aged out. Zero: the response
	// states no counter, and Remaining is ignored.
	Reset time.Time
	// Gradual reports a counter that frees calls as they age (a sliding
	// window or a token bucket) rather than all at once at Reset (a
	// fixed window). It decides which of our calls the API still counts:
	// those since the start of its window (Reset minus the Throttler's
	// interval) for a fixed window, those of the last interval for a
	// gradual one.
	Gradual bool
}

// stated reports whether q states a counter.
func (q Quota) stated() bool { return !q.Reset.IsZero() }
