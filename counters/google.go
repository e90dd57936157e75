package counters

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Google returns the Counters of Google's APIs over REST (Gemini, Vertex
// AI, Google Cloud), whose refusals say how long to wait in the body, not
// in a header. An error body, as Google's API design guide (AIP-193) lays
// it out, is {"error": {"code", "message", "status", "details": [...]}}
// (a JSON array of such objects on some streaming methods); each detail
// names its type in "@type":
//
//   - google.rpc.RetryInfo: "retryDelay", a duration such as "37s" or
//     "0.5s": a 429, 503 or rate-limit 403 carrying it pauses every
//     replica until then;
//   - google.rpc.QuotaFailure: "violations", whose first names the quota
//     refused ("quotaId", "quotaMetric" or "subject"): Quota.Bucket;
//   - google.rpc.ErrorInfo: "reason" (RATE_LIMIT_EXCEEDED and the like)
//     and "metadata" ("quota_limit", "quota_metric"): the quota refused,
//     when no QuotaFailure names it.
//
// A Retry-After header, which some Google front ends send, comes first.
// A 429 that states no delay backs every replica off (see Transport); so
// does a 403 whose error says a rate or quota limit was exceeded (the
// older APIs' "rateLimitExceeded", "userRateLimitExceeded" and
// "quotaExceeded" reasons, or status RESOURCE_EXHAUSTED), which is a
// refusal for quota, unlike a 403 for a missing permission, which is left
// alone. Google states no counter on its responses: nothing is followed
// between refusals.
//
// The body is read from the first PeekBytes the Transport reads ahead,
// and handed on to the caller whole. A body cut short there, which JSON
// cannot parse, is searched for its retryDelay field alone.
func Google() Counters { return googleCounters{} }

type googleCounters struct{}

// Peek asks for the body of the responses that may be refusals for quota.
func (googleCounters) Peek(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusForbidden:
		return true
	}
	return false
}

func (g googleCounters) Read(resp *http.Response, body []byte, now time.Time) Quota {
	var q Quota
	if !g.Peek(resp) {
		return q
	}
	e, parsed := parseGoogleError(body)
	q.Bucket = e.bucket()
	if resp.StatusCode == http.StatusForbidden && !e.rateLimited() {
		return Quota{} // a 403 for a permission, say: no quota
	}
	if q.pauseFor(resp, now) {
		return q
	}
	delay, ok := e.retryDelay()
	if !parsed {
		delay, ok = scanRetryDelay(body)
	}
	switch {
	case ok:
		q.Verdict, q.Until = Pause, now.Add(delay)
	case resp.StatusCode == http.StatusForbidden:
		q.Verdict = Pause // no end stated: the Transport's back-off
	}
	return q
}

// googleError is the part of a Google error body the preset reads.
type googleError struct {
	Status  string         `json:"status"`
	Errors  []googleReason `json:"errors"` // the older APIs' list of reasons
	Details []googleDetail `json:"details"`
}

type googleReason struct {
	Reason string `json:"reason"`
}

// googleDetail is one entry of "details", whatever its type: the fields
// the preset reads of RetryInfo, QuotaFailure and ErrorInfo.
type googleDetail struct {
	Type       string `json:"@type"`
	RetryDelay string `json:"retryDelay"`
	Violations []struct {
		Subject     string `json:"subject"`
		QuotaMetric string `json:"quotaMetric"`
		QuotaID     string `json:"quotaId"`
	} `json:"violations"`
	Reason   string            `json:"reason"`
	Metadata map[string]string `json:"metadata"`
}

// parseGoogleError reads body's error, from an object or from the first
// element of an array of them, and reports whether body parsed.
func parseGoogleError(body []byte) (googleError, bool) {
	type wrapper struct {
		Error googleError `json:"error"`
	}
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var list []wrapper
		if json.Unmarshal(body, &list) != nil {
			return googleError{}, false
		}
		if len(list) == 0 {
			return googleError{}, true
		}
		return list[0].Error, true
	}
	var w wrapper
	if json.Unmarshal(body, &w) != nil {
		return googleError{}, false
	}
	return w.Error, true
}

// detail returns the first detail of type name (the part after the last
// "/" of "@type"), and whether there is one.
func (e googleError) detail(name string) (googleDetail, bool) {
	for _, d := range e.Details {
		if d.Type[strings.LastIndexByte(d.Type, '/')+1:] == name {
			return d, true
		}
	}
	return googleDetail{}, false
}

// retryDelay is RetryInfo's delay, when e has one that parses.
func (e googleError) retryDelay() (time.Duration, bool) {
	d, ok := e.detail("google.rpc.RetryInfo")
	if !ok {
		return 0, false
	}
	return parseProtoDuration(d.RetryDelay)
}

// bucket names the quota e says was refused: QuotaFailure's first
// violation, else ErrorInfo's metadata; "" when neither names one.
func (e googleError) bucket() string {
	if d, ok := e.detail("google.rpc.QuotaFailure"); ok && len(d.Violations) > 0 {
		v := d.Violations[0]
		for _, name := range []string{v.QuotaID, v.QuotaMetric, v.Subject} {
			if name != "" {
				return name
			}
		}
	}
	if d, ok := e.detail("google.rpc.ErrorInfo"); ok {
		for _, k := range []string{"quota_limit", "quota_metric"} {
			if name := d.Metadata[k]; name != "" {
				return name
			}
		}
	}
	return ""
}

// googleRateReasons are the reasons that make an error a refusal for a
// rate or quota limit, in the older APIs' "errors" list and in
// ErrorInfo.
var googleRateReasons = map[string]bool{
	"rateLimitExceeded": true, "userRateLimitExceeded": true, "quotaExceeded": true,
	"dailyLimitExceeded": true, "RATE_LIMIT_EXCEEDED": true, "RESOURCE_EXHAUSTED": true,
}

// rateLimited reports whether e says a rate or quota limit refused the
// call.
func (e googleError) rateLimited() bool {
	if e.Status == "RESOURCE_EXHAUSTED" {
		return true
	}
	for _, r := range e.Errors {
		if googleRateReasons[r.Reason] {
			return true
		}
	}
	d, ok := e.detail("google.rpc.ErrorInfo")
	return ok && googleRateReasons[d.Reason]
}

// parseProtoDuration parses a duration as protobuf's JSON writes one:
// decimal seconds with up to 9 fractional digits and an "s", such as "37s"
// or "0.250s"; false when v is anything else (negative included). At most
// a day, as RetryAfter.
func parseProtoDuration(v string) (time.Duration, bool) {
	num, ok := strings.CutSuffix(strings.TrimSpace(v), "s")
	whole, frac, dot := strings.Cut(num, ".")
	if !ok || !digits(whole) || len(frac) > 9 || (dot && !digits(frac)) {
		return 0, false
	}
	const day = 24 * 60 * 60
	secs, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || secs >= day { // only digits: too large to parse, or a day or more
		return 24 * time.Hour, true
	}
	nanos, _ := strconv.Atoi((frac + "000000000")[:9])
	return time.Duration(secs)*time.Second + time.Duration(nanos), true
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// retryDelayField finds a retryDelay field in a body JSON cannot parse.
var retryDelayField = regexp.MustCompile(`"retryDelay"\s*:\s*"([^"]*)"`)

// scanRetryDelay returns the first retryDelay body holds, for a body cut
// short at PeekBytes.
func scanRetryDelay(body []byte) (time.Duration, bool) {
	m := retryDelayField.FindSubmatch(body)
	if m == nil {
		return 0, false
	}
	return parseProtoDuration(string(m[1]))
}
