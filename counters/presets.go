package counters

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"
)

// pauseFor makes q a Pause until what resp's Retry-After says, and reports
// whether it had one.
func (q *Quota) pauseFor(resp *http.Response, now time.Time) bool {
	d, ok := RetryAfter(resp.Header.Get("Retry-After"), now)
	if ok {
		q.Verdict, q.Until = Pause, now.Add(d)
	}
	return ok
}

// Default returns the Counters a Transport without Counters reads: a 429 or
// 503 with Retry-After pauses every replica until then, and nothing else
// is read. (What the Transport does with a 429 or 503 that no Counters
// makes anything of is the same for every Counters: see Transport.)
func Default() Counters { return retryAfterCounters{} }

type retryAfterCounters struct{}

func (retryAfterCounters) Peek(*http.Response) bool { return false }

func (retryAfterCounters) Read(resp *http.Response, _ []byte, now time.Time) Quota {
	var q Quota
	if slowDown(resp) {
		q.pauseFor(resp, now)
	}
	return q
}

// GitHub returns the Counters of GitHub's REST API, as its documentation
// on REST rate limits describes them:
//
//   - every response states the primary limit's counter in
//     x-ratelimit-remaining and x-ratelimit-reset (UTC epoch seconds),
//     for the resource named in x-ratelimit-resource ("core", "search",
//     "graphql", ...); only the resources named here are followed, "core"
//     when none is named, as a Throttler holds one quota;
//   - a 403 or 429 with retry-after pauses until then; one with
//     x-ratelimit-remaining 0 until x-ratelimit-reset (a followed
//     resource only); one whose message says a secondary rate limit was
//     exceeded (or, in older wording, the abuse detection mechanism),
//     with neither header, backs off (see Pause: at least a minute,
//     growing while it repeats, as GitHub asks);
//   - any other 403 (no permission, say) is no quota and is left alone.
//
// The counter is a fixed window: Remaining calls until Reset, when it
// starts afresh.
func GitHub(resources ...string) Counters {
	g := githubCounters{follow: map[string]bool{}}
	for _, r := range resources {
		g.follow[r] = true
	}
	if len(g.follow) == 0 {
		g.follow["core"] = true
	}
	return g
}

type githubCounters struct{ follow map[string]bool }

func (githubCounters) Peek(resp *http.Response) bool {
	return resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests
}

func (g githubCounters) Read(resp *http.Response, body []byte, now time.Time) Quota {
	h := resp.Header
	q := Quota{Bucket: h.Get("X-RateLimit-Resource")}
	followed := q.Bucket == "" || g.follow[q.Bucket]
	rem, okRem := HeaderInt(h, "X-RateLimit-Remaining")
	reset, okReset := epochSeconds(h.Get("X-RateLimit-Reset"))
	if followed && okRem && okReset {
		q.Remaining, q.Reset = rem, reset
	}
	if !g.Peek(resp) && !slowDown(resp) {
		return q
	}
	switch {
	case q.pauseFor(resp, now):
	case okRem && rem == 0 && okReset:
		if followed {
			q.Verdict, q.Until = Pause, reset
		}
	case secondaryLimit(body):
		q.Verdict, q.Backoff = Pause, time.Minute // no end stated: back off, a minute at least
	}
	return q
}

// secondaryLimit reports whether a GitHub error body says a secondary rate
// limit (formerly "abuse detection") refused the call.
func secondaryLimit(body []byte) bool {
	b := bytes.ToLower(body)
	return bytes.Contains(b, []byte("secondary rate limit")) || bytes.Contains(b, []byte("abuse detection"))
}

// OpenAI returns the Counters of OpenAI's API for a Throttler of requests,
// as its rate-limit guide describes the headers: x-ratelimit-remaining-
// requests, and x-ratelimit-reset-requests, the time until the request
// limit "resets to its initial state", as a duration such as "1s", "6m0s"
// or "12ms". The counter frees requests as they age (Gradual): Reset is
// when every request it counts has aged out.
//
// A 429 or 503 with Retry-After pauses until then; a 429 without it, when
// the tokens remaining are 0, until their reset (no request goes before).
// The token counters are read for that only: this version follows
// requests, not tokens (a token Throttler holds estimates until they are
// settled, so what its window holds is not what the API counted).
func OpenAI() Counters {
	return pairCounters{
		remaining: "X-Ratelimit-Remaining-Requests", reset: "X-Ratelimit-Reset-Requests",
		tokensRemaining: []string{"X-Ratelimit-Remaining-Tokens"}, tokensReset: []string{"X-Ratelimit-Reset-Tokens"},
		parse: parseResetDuration,
	}
}

// Anthropic returns the Counters of Anthropic's API for a Throttler of
// requests, as its rate-limit documentation describes the headers:
// anthropic-ratelimit-requests-remaining, and anthropic-ratelimit-
// requests-reset, the time the request limit will be fully replenished,
// in RFC 3339 format. Its limits are token buckets, replenished
// continuously (Gradual). A 429 or 503 with retry-after pauses until
// then; a 429 without it, when the tokens (total, input or output)
// remaining are 0, until the latest of their resets. Token counters are
// read for that only, as for OpenAI.
func Anthropic() Counters {
	return pairCounters{
		remaining: "Anthropic-Ratelimit-Requests-Remaining", reset: "Anthropic-Ratelimit-Requests-Reset",
		tokensRemaining: []string{"Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Remaining"},
		tokensReset:     []string{"Anthropic-Ratelimit-Tokens-Reset", "Anthropic-Ratelimit-Input-Tokens-Reset", "Anthropic-Ratelimit-Output-Tokens-Reset"},
		parse:           parseResetTime,
	}
}

// pairCounters reads a vendor's remaining/reset header pair for requests,
// and its token pairs for a 429's end.
type pairCounters struct {
	remaining, reset             string
	tokensRemaining, tokensReset []string
	parse                        func(v string, now time.Time) (time.Time, bool)
}

func (pairCounters) Peek(*http.Response) bool { return false }

func (p pairCounters) Read(resp *http.Response, _ []byte, now time.Time) Quota {
	h := resp.Header
	q := Quota{Gradual: true}
	rem, okRem := HeaderInt(h, p.remaining)
	reset, okReset := p.parse(h.Get(p.reset), now)
	if okRem && okReset {
		q.Remaining, q.Reset = rem, reset
	}
	if !slowDown(resp) || q.pauseFor(resp, now) || resp.StatusCode != http.StatusTooManyRequests {
		return q
	}
	// Requests at zero need no pause: the counter frees a request as one
	// ages out, and following it (Remaining 0, Gradual) holds every
	// replica to the requests of ours it counts. Tokens at zero keep any
	// request out until they come back.
	var until time.Time
	for i, name := range p.tokensRemaining {
		if n, ok := HeaderInt(h, name); ok && n == 0 {
			if at, ok := p.parse(h.Get(p.tokensReset[i]), now); ok && at.After(until) {
				until = at
			}
		}
	}
	if !until.IsZero() {
		q.Verdict, q.Until = Pause, until
	}
	return q
}

// IETF returns the Counters of the RateLimit header fields of the IETF
// httpapi working group's draft (draft-ietf-httpapi-ratelimit-headers,
// revision 10): RateLimit, a structured-field list of service limits
// such as `"default";r=50;t=30`, where r is the quota remaining and t the
// seconds until more quota is made available. The item followed is the
// first of the policies named here that the field lists, or its first
// item when none is named. Without a RateLimit field, it reads the fields
// of the earlier drafts that many servers still send: RateLimit-Remaining
// and RateLimit-Reset (delta seconds). A limit without t states no
// counter. A 429 or 503 with Retry-After pauses until then; a 429 whose
// remaining quota is 0, until t.
//
// The draft lets the server choose its algorithm and warns that not all
// of the quota need be back at t: the counter is read as a fixed window
// (Remaining calls until Reset), which never lets more through than a
// sliding window would.
func IETF(policies ...string) Counters { return ietfCounters{policies: policies} }

type ietfCounters struct{ policies []string }

func (ietfCounters) Peek(*http.Response) bool { return false }

func (c ietfCounters) Read(resp *http.Response, _ []byte, now time.Time) Quota {
	var q Quota
	if items := sfList(resp.Header.Values("RateLimit")); len(items) > 0 {
		it := items[0]
		for _, p := range c.policies {
			if i := indexItem(items, p); i >= 0 {
				it = items[i]
				break
			}
		}
		r, okR := sfInt(it.params["r"])
		t, okT := sfInt(it.params["t"])
		if okR && okT && r >= 0 && t >= 0 {
			q.Bucket, q.Remaining, q.Reset = it.name, int(r), now.Add(time.Duration(min(t, int64(24*time.Hour/time.Second)))*time.Second)
		}
	} else {
		r, okR := HeaderInt(resp.Header, "RateLimit-Remaining")
		t, okT := HeaderInt(resp.Header, "RateLimit-Reset")
		switch {
		case !okR || !okT || t < 0:
		case t > 1e9:
			// The drafts say delta-seconds; many servers send the epoch
			// second of the reset instead: no delta is that long.
			if at := time.Unix(int64(t), 0); at.After(now) {
				q.Remaining, q.Reset = r, minTime(at, now.Add(24*time.Hour))
			}
		default:
			q.Remaining, q.Reset = r, now.Add(time.Duration(min(t, 24*3600))*time.Second)
		}
	}
	if slowDown(resp) && !q.pauseFor(resp, now) && resp.StatusCode == http.StatusTooManyRequests && q.stated() && q.Remaining == 0 {
		q.Verdict, q.Until = Pause, q.Reset
	}
	return q
}

// Stripe returns the Counters of Stripe's API, which states no counter: a
// 429 whose error code is lock_timeout is, as Stripe's rate-limit
// documentation explains, no rate limit but another request or process
// holding the object the call changes; it concerns this call only
// (RetryCall), and Stripe's own client libraries retry it. Other 429s
// and 503s pause every replica when they carry Retry-After.
func Stripe() Counters { return stripeCounters{} }

type stripeCounters struct{}

func (stripeCounters) Peek(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests
}

func (stripeCounters) Read(resp *http.Response, body []byte, now time.Time) Quota {
	var q Quota
	if resp.StatusCode == http.StatusTooManyRequests && stripeLockTimeout(body) {
		q.Verdict = RetryCall
		return q
	}
	if slowDown(resp) {
		q.pauseFor(resp, now)
	}
	return q
}

// stripeLockTimeout reports whether a Stripe error body's code is
// lock_timeout.
func stripeLockTimeout(body []byte) bool {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil {
		return e.Error.Code == "lock_timeout"
	}
	// A body cut short at PeekBytes: look for the field itself.
	return bytes.Contains(body, []byte(`"code": "lock_timeout"`)) || bytes.Contains(body, []byte(`"code":"lock_timeout"`))
}
