package throttler

import "github.com/go-throttler/throttler/counters"

// Counters reads what an API says of its own quota on each response; a
// Transport with Counters set follows it for every replica (see
// Transport.Counters). It is counters.Counters, where the vendor presets
// live; the presets are re-exported here.
type Counters = counters.Counters

// Quota is what one response says of the API's quota (counters.Quota).
type Quota = counters.Quota

// Verdict is what a response asks of the callers (counters.Verdict).
type Verdict = counters.Verdict

// The verdicts (see counters.Verdict).
const (
	Proceed   = counters.Proceed
	Pause     = counters.Pause
	RetryCall = counters.RetryCall
)

// PeekBytes is how much of a response body a Transport reads ahead for
// Counters.Read, at most (counters.PeekBytes).
const PeekBytes = counters.PeekBytes

// GitHub returns the Counters of GitHub's REST API (counters.GitHub).
func GitHub(resources ...string) Counters { return counters.GitHub(resources...) }

// OpenAI returns the Counters of OpenAI's API for a Throttler of requests
// (counters.OpenAI).
func OpenAI() Counters { return counters.OpenAI() }

// Anthropic returns the Counters of Anthropic's API for a Throttler of
// requests (counters.Anthropic).
func Anthropic() Counters { return counters.Anthropic() }

// IETF returns the Counters of the IETF RateLimit header fields
// (counters.IETF).
func IETF(policies ...string) Counters { return counters.IETF(policies...) }

// Stripe returns the Counters of Stripe's API (counters.Stripe).
func Stripe() Counters { return counters.Stripe() }
