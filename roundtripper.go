package throttler

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RoundTripper returns an http.RoundTripper that waits for one call's worth of
// quota on t, using the request's context, before handing the request to next
// (http.DefaultTransport when next is nil, looked up at each request). It is
// &Transport{Base: next, Route: t.Route()}: when the API answers 429 or 503
// with Retry-After, every Throttler on t's key pauses until then.
//
// It keeps to net/http's contract for a RoundTripper in all but one point:
// it does not modify the request or read its body, it returns next's
// response and error unchanged (a 429 is a response, not an error), and
// when the wait fails it closes the request body and returns the wait's
// error, so that errors.Is(err, context.DeadlineExceeded) and the like hold
// through http.Client's *url.Error. The exception: the contract asks a
// RoundTripper not to interpret the response, and this one reads the
// status and Retry-After of a 429 or 503 to pause the other replicas (it
// never retries: Transport.Retries is 0). It is safe for concurrent use.
func (t *Throttler) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return &Transport{Base: next, Route: t.Route()}
}

// Route returns a Transport.Route that sends every request through t.
func (t *Throttler) Route() func(*http.Request) *Throttler {
	return func(*http.Request) *Throttler { return t }
}

// ByHost returns a Transport.Route that picks the Throttler by the request's
// host (req.URL.Host, with its port if the URL has one). Requests to other
// hosts go unthrottled.
func ByHost(throttlers map[string]*Throttler) func(*http.Request) *Throttler {
	return func(req *http.Request) *Throttler { return throttlers[req.URL.Host] }
}

// Transport is an http.RoundTripper that throttles each request on the
// Throttler Route picks for it, and shares the API's own back-off signals
// with every replica through Redis:
//
//   - a response 429 (Too Many Requests) or 503 (Service Unavailable) with a
//     Retry-After header, in seconds or as an HTTP date, pauses the
//     Throttler for every replica until then (see Throttler.PauseUntil);
//   - with LimitHeader set, a response stating a lower limit than the
//     Throttler's lowers it for every replica (see Throttler.SetLimit).
//
// Like RoundTripper, it keeps to net/http's contract except that it
// interprets responses: it reads the status and headers named above, and
// with Retries set it answers a 429 or 503 itself by sending the request
// again, which the contract leaves to the client. It never modifies the
// request (a retry sends a clone with a fresh body), returns Base's
// response unchanged unless it retries, and closes the request body on
// every path where it does not hand it to Base. A request whose body cannot
// be replayed is never sent twice. A Transport is safe for concurrent use; do not change its fields
// once in use.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport, looked up
	// at each request.
	Base http.RoundTripper

	// Route picks the Throttler for a request, by host, path or anything
	// else in it; a nil result sends the request unthrottled. Route must be
	// set.
	Route func(*http.Request) *Throttler

	// Retries is how many times a request answered 429 or 503 with
	// Retry-After is sent again, once the pause is over and the Throttler
	// admits it again. Only requests without a body, or whose GetBody can
	// make a fresh one, are retried; the others get the 429 or 503. Default
	// 0: the response is returned as it came.
	Retries int

	// MaxPause caps how long one Retry-After may pause the Throttler.
	// Default 15 minutes.
	MaxPause time.Duration

	// LimitHeader names a response header stating how many calls per
	// interval the API allows (such as "X-RateLimit-Limit", when the API's
	// interval is the Throttler's). When a response says less than the
	// Throttler's limit, every replica lowers the limit to it for LimitFor
	// (refreshed while responses keep saying so); when it says at least the
	// Throttler's limit, a lowering ends. Empty (the default): ignored.
	LimitHeader string

	// LimitFor is how long a limit read from LimitHeader holds. Default 1h.
	LimitFor time.Duration

	// Cost, when set, prices each request in the Throttler's units (tokens,
	// query cost points) instead of one call each, settled from the
	// response: see Cost.
	Cost *Cost
}

// RoundTrip implements http.RoundTripper.
func (tr *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var t *Throttler
	if tr.Route != nil {
		t = tr.Route(req)
	}
	if t == nil {
		return tr.base().RoundTrip(req)
	}
	send := req
	for attempt := 0; ; attempt++ {
		permit, err := tr.admit(t, send)
		if err != nil {
			closeBody(send)
			return nil, err
		}
		resp, err := tr.base().RoundTrip(send)
		if err != nil {
			if permit != nil {
				permit.Done() // it keeps its estimate: the request may have reached the API
			}
			return nil, err
		}
		if permit != nil {
			endOnRead(req, resp, permit, tr.Cost)
		}
		paused := tr.learn(t, req, resp)
		if attempt >= tr.Retries || !paused || !replayable(req) {
			return resp, nil
		}
		next, err := retryRequest(req)
		if err != nil {
			return resp, nil // no fresh body: the caller gets the 429 itself
		}
		drain(resp)
		send = next
	}
}

func (tr *Transport) base() http.RoundTripper {
	if tr.Base != nil {
		return tr.Base
	}
	return http.DefaultTransport
}

// learn shares what resp says about the API's quota with every replica. It
// reports whether resp asked for a pause.
func (tr *Transport) learn(t *Throttler, req *http.Request, resp *http.Response) (paused bool) {
	// The caller's context may be about to end; the news is for everyone.
	ctx := context.WithoutCancel(req.Context())
	if backOff(resp) {
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), t.now()); ok {
			maxPause := tr.MaxPause
			if maxPause <= 0 {
				maxPause = 15 * time.Minute
			}
			t.PauseUntil(ctx, t.now().Add(min(d, maxPause))) // a failure is logged; the response stands
			paused = true
		}
	}
	if tr.LimitHeader != "" {
		if v := resp.Header.Get(tr.LimitHeader); v != "" {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
				d := tr.LimitFor
				if d <= 0 {
					d = time.Hour
				}
				t.follow(ctx, n, d)
			}
		}
	}
	return paused
}

// follow lowers (or restores) the shared limit to what the API stated,
// writing to Redis only when that changes what is in force or the lowering
// is past half its time.
func (t *Throttler) follow(ctx context.Context, n int, d time.Duration) {
	t.mu.Lock()
	serverNow := t.clock.server(t.now())
	lowered := t.shared.lowered > 0 && serverNow < t.shared.lowerTill
	fresh := lowered && t.shared.lowered == n && t.shared.lowerTill-serverNow > d.Microseconds()/2
	t.mu.Unlock()
	if fresh || (!lowered && n >= t.wins[0].limit) {
		return
	}
	t.SetLimit(ctx, n, d) // a failure is logged; the response stands
}

// backOff reports whether the API asked us to slow down.
func backOff(resp *http.Response) bool {
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
}

// retryAfter parses a Retry-After value: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
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
			return d, true
		}
		return 0, false
	}
	return 0, false
}

// replayable reports whether req can be sent again: it has no body, or
// GetBody makes a fresh one.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// retryRequest returns a clone of req with a fresh body, for a retry.
func retryRequest(req *http.Request) (*http.Request, error) {
	next := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}

// drain reads a little of a response that will not be returned, so that its
// connection can be reused, and closes it.
func drain(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
