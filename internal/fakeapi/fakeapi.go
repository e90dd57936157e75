// Package fakeapi is a fake third-party HTTP API with a strict sliding-window
// rate limit, used by the examples and tests of the throttler.
//
// An *API answers 200 to a request unless accepting it would put more than
// limit accepted requests into some window of length interval; such a request
// is answered 429 Too Many Requests with a Retry-After header and is not
// counted. Every accepted arrival is recorded so that a test or an example can
// check afterwards, with MaxInWindow, that the callers never went over the
// limit.
package fakeapi

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// ReplicaHeader is the request header an API reads to attribute a request to
// a replica (any string) in its per-replica counts. Requests without it are
// counted under the empty string.
const ReplicaHeader = "X-Replica"

// LimitHeader is the response header in which an API states, on every
// response (200 and 429 alike), the limit in force when the request arrived:
// how many requests it accepts per interval. SetLimit changes what it says
// from the next request on.
const LimitHeader = "X-RateLimit-Limit"

// Rejection is one request answered 429.
type Rejection struct {
	// At is the request's arrival time, read from the API's clock.
	At time.Time
	// Replica is the request's ReplicaHeader value.
	Replica string
}

// API is a fake rate-limited third-party API. It implements http.Handler and
// is safe for concurrent use. Create one with New.
type API struct {
	now         func() time.Time
	interval    time.Duration
	maxInFlight int           // 0: no cap
	hold        time.Duration // how long an accepted request is held

	mu       sync.Mutex
	limit    int
	arrivals []time.Time // accepted arrivals, in order of acceptance (non-decreasing)
	rejected []Rejection // rejected arrivals, in order (non-decreasing)
	total    Counts      // since New
	period   Counts      // since the last TakeCounts

	inFlight     int         // requests being served
	mostInFlight int         // the most in flight at once, refused arrivals included
	overCap      []Rejection // requests refused for the cap
	spans        []Span      // accepted requests
}

// Span is one accepted request: from its arrival until its response was
// decided, read from the API's clock. A request is in flight at t when
// Start <= t < End; End is zero while it is.
type Span struct {
	Replica    string
	Start, End time.Time
}

// Counts holds numbers of accepted and rejected (429) requests, in total and
// per replica (keyed by the X-Replica header value).
type Counts struct {
	// Accepted is the number of requests answered 200.
	Accepted int
	// Rejected is the number of requests answered 429.
	Rejected int
	// AcceptedByReplica is Accepted broken down by replica.
	AcceptedByReplica map[string]int
	// RejectedByReplica is Rejected broken down by replica.
	RejectedByReplica map[string]int
}

// Stats summarises a whole run of an API.
type Stats struct {
	// Counts are the totals since New.
	Counts
	// MaxInWindow is the largest number of accepted requests found in any
	// half-open window of length Interval over the whole run (see the
	// function MaxInWindow). It never exceeds the largest limit in force.
	MaxInWindow int
	// Limit is the limit in force when Stats was called.
	Limit int
	// Interval is the length of the sliding window.
	Interval time.Duration
}

// Option configures an API in New.
type Option func(*API)

// WithClock makes the API read arrival times from now instead of time.Now,
// so that tests can move time forward without sleeping. now is called with
// the API's mutex held and must return non-decreasing times.
func WithClock(now func() time.Time) Option {
	return func(a *API) { a.now = now }
}

// WithMaxInFlight makes the API refuse a request that arrives while n
// requests are in flight: it answers 429 at once, without Retry-After (the
// cap is not a rate: nothing says when a place frees), holds nothing and
// counts nothing in the window, and keeps the arrival for OverCap. n < 1
// means no cap.
func WithMaxInFlight(n int) Option {
	return func(a *API) { a.maxInFlight = max(n, 0) }
}

// WithHold makes the API take d to answer each request it accepts: the
// request stays in flight from its arrival until d later, when its
// response is decided and before a byte of it is written, so that a client
// that ends a call on reading the response ends it after the API did.
func WithHold(d time.Duration) Option {
	return func(a *API) { a.hold = d }
}

// New returns an API that accepts at most limit requests in any window of
// length interval. It panics if limit < 1 or interval <= 0.
func New(limit int, interval time.Duration, opts ...Option) *API {
	if limit < 1 {
		panic(fmt.Sprintf("fakeapi: limit must be at least 1, got %d", limit))
	}
	if interval <= 0 {
		panic(fmt.Sprintf("fakeapi: interval must be positive, got %v", interval))
	}
	a := &API{now: time.Now, interval: interval, limit: limit}
	for _, opt := range opts {
		opt(a)
	}
	a.total = newCounts()
	a.period = newCounts()
	return a
}

func newCounts() Counts {
	return Counts{AcceptedByReplica: map[string]int{}, RejectedByReplica: map[string]int{}}
}

func (c Counts) clone() Counts {
	c.AcceptedByReplica = maps.Clone(c.AcceptedByReplica)
	c.RejectedByReplica = maps.Clone(c.RejectedByReplica)
	return c
}

// ServeHTTP reads and discards the request body, then takes the arrival time.
// With WithMaxInFlight, a request arriving while the cap is full is refused
// (see there). Otherwise it either accepts the request (200, body
// {"ok":true}) or, if accepting it would put more than the limit into the
// window of length interval ending at the arrival, rejects it (429 with a Retry-After header in whole seconds,
// rounded up, at least 1). Rejected requests are not counted in the window;
// their arrivals are kept for Rejections. Every response states the limit in
// force in LimitHeader. An accepted request is held for WithHold's time
// before its response is written.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	replica := r.Header.Get(ReplicaHeader)

	a.mu.Lock()
	now := a.now()
	a.inFlight++
	a.mostInFlight = max(a.mostInFlight, a.inFlight)
	if a.maxInFlight > 0 && a.inFlight > a.maxInFlight {
		a.inFlight--
		a.overCap = append(a.overCap, Rejection{At: now, Replica: replica})
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"ok":false,"error":"too many requests in flight"}`+"\n")
		return
	}
	limit := a.limit
	n := len(a.arrivals)
	// The window (now-interval, now] already holds limit accepted requests
	// iff the limit-th most recent accepted arrival is less than interval ago.
	var retryAfter time.Duration
	if n >= limit {
		if oldest := a.arrivals[n-limit]; now.Sub(oldest) < a.interval {
			retryAfter = oldest.Add(a.interval).Sub(now)
		}
	}
	ok := retryAfter <= 0
	if ok {
		a.arrivals = append(a.arrivals, now)
		a.total.Accepted++
		a.total.AcceptedByReplica[replica]++
		a.period.Accepted++
		a.period.AcceptedByReplica[replica]++
		a.spans = append(a.spans, Span{Replica: replica, Start: now})
		if hold := a.hold; hold > 0 {
			i := len(a.spans) - 1
			a.mu.Unlock()
			time.Sleep(hold)
			a.mu.Lock()
			a.spans[i].End = a.now()
		} else {
			a.spans[len(a.spans)-1].End = now
		}
	} else {
		a.rejected = append(a.rejected, Rejection{At: now, Replica: replica})
		a.total.Rejected++
		a.total.RejectedByReplica[replica]++
		a.period.Rejected++
		a.period.RejectedByReplica[replica]++
	}
	a.inFlight--
	a.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(LimitHeader, strconv.Itoa(limit))
	if ok {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"ok":true}`+"\n")
		return
	}
	w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(retryAfter), 10))
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = io.WriteString(w, `{"ok":false,"error":"rate limit exceeded"}`+"\n")
}

// retryAfterSeconds rounds d up to whole seconds, with a minimum of 1.
func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// SetLimit changes the limit for requests arriving from now on, e.g. to
// simulate the provider lowering the quota mid-run. Requests already accepted
// stay counted. It panics if n < 1.
func (a *API) SetLimit(n int) {
	if n < 1 {
		panic(fmt.Sprintf("fakeapi: limit must be at least 1, got %d", n))
	}
	a.mu.Lock()
	a.limit = n
	a.mu.Unlock()
}

// Limit returns the limit in force.
func (a *API) Limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limit
}

// Interval returns the length of the sliding window.
func (a *API) Interval() time.Duration { return a.interval }

// Arrivals returns a copy of the arrival times of all accepted requests, in
// order.
func (a *API) Arrivals() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.arrivals)
}

// Rejections returns a copy of every request answered 429, with its arrival
// time and replica, in order of arrival.
func (a *API) Rejections() []Rejection {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.rejected)
}

// TakeCounts returns the counts since the previous call to TakeCounts (or
// since New) and resets them; call it once a second for a live per-second
// display.
func (a *API) TakeCounts() Counts {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.period
	a.period = newCounts()
	return c
}

// Stats returns the totals since New and the largest number of accepted
// requests in any window of length interval over the whole run.
func (a *API) Stats() Stats {
	a.mu.Lock()
	s := Stats{Counts: a.total.clone(), Limit: a.limit, Interval: a.interval}
	arrivals := slices.Clone(a.arrivals)
	a.mu.Unlock()
	s.MaxInWindow = maxInSorted(arrivals, a.interval)
	return s
}

// MaxInWindow returns the largest number of times that fall within one
// half-open window [t, t+interval), over all t. times need not be sorted and
// is not modified. Two times exactly interval apart are never in the same
// window. It returns 0 if times is empty or interval <= 0.
func MaxInWindow(times []time.Time, interval time.Duration) int {
	sorted := slices.Clone(times)
	slices.SortFunc(sorted, func(x, y time.Time) int { return x.Compare(y) })
	return maxInSorted(sorted, interval)
}

// maxInSorted is MaxInWindow for times sorted in non-decreasing order.
func maxInSorted(times []time.Time, interval time.Duration) int {
	if interval <= 0 {
		return 0
	}
	best, i := 0, 0
	for j, t := range times {
		// Drop from the window every time at least interval before t.
		for t.Sub(times[i]) >= interval {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// InFlightStats summarises the requests in flight over a whole run.
type InFlightStats struct {
	// Max is the most requests in flight at once, counting each arrival,
	// refused ones included: above the cap exactly when OverCap > 0.
	Max int
	// Cap is WithMaxInFlight's n, 0 for none.
	Cap int
	// OverCap is the number of requests refused for the cap.
	OverCap int
	// Now is the number in flight when InFlight was called.
	Now int
}

// InFlight returns what the API saw of the requests in flight.
func (a *API) InFlight() InFlightStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return InFlightStats{Max: a.mostInFlight, Cap: a.maxInFlight, OverCap: len(a.overCap), Now: a.inFlight}
}

// OverCap returns every request refused for the cap, in order of arrival.
func (a *API) OverCap() []Rejection {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.overCap)
}

// Spans returns every accepted request's span, in order of arrival.
func (a *API) Spans() []Span {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.spans)
}
