package counters

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HeaderInt parses the header name of h as a non-negative integer, for
// Counters of one's own: false when it is missing, negative or no integer.
func HeaderInt(h http.Header, name string) (int, bool) {
	v := strings.TrimSpace(h.Get(name))
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// epochSeconds parses a time given in UTC epoch seconds.
func epochSeconds(v string) (time.Time, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

// parseResetDuration parses a reset given as the time left, such as OpenAI's
// "6m0s", "1s" or "12ms" (a bare number is seconds).
func parseResetDuration(v string, now time.Time) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
			return time.Time{}, false
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 || d > 24*time.Hour {
		return time.Time{}, false
	}
	return now.Add(d), true
}

// parseResetTime parses a reset given as an RFC 3339 time.
func parseResetTime(v string, _ time.Time) (time.Time, bool) {
	at, err := time.Parse(time.RFC3339, strings.TrimSpace(v))
	return at, err == nil
}

// slowDown reports whether the API asked us to slow down.
func slowDown(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
}

// RetryAfter parses a Retry-After value, delay-seconds or an HTTP date, as
// the time to wait from now (at most a day): false when v is empty,
// malformed, negative or a date already past.
func RetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := at.Sub(now); d > 0 {
			return min(d, 24*time.Hour), true
		}
		return 0, false
	}
	return 0, false
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
