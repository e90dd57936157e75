package throttler

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler/counters"
)

// RoundTripper returns an http.RoundTripper that waits for one call's worth of
// quota on t, using the request's context, before handing the request to next
// (http.DefaultTransport when next is nil, looked up at each request). It is
// &Transport{Base: next, Route: t.Route()}: when the API answers 429 or 503
// with Retry-After, every Throttler on t's key pauses until then.
//
// It keeps to net/http's contract for a RoundTripper in all but one point:
// it does not modify the request or read its body (next gets a shallow
// copy, Request.WithContext, whose context holds the request's write at
// its connection until the call's slot holds: see Transport); it returns
// next's response and error unchanged (a 429 is a response, not an error),
// but for the response's Body, which it wraps, passing the same bytes
// through, when t has WithInFlight (the place goes back once the body is
// read to the end or closed); and when the wait fails it closes the
// request body and returns the wait's error, so that errors.Is(err,
// context.DeadlineExceeded) and the like hold through http.Client's
// *url.Error. The exception: the contract asks a RoundTripper not to
// interpret the response, and this one reads the status and Retry-After
// of a 429 or 503 to pause the other replicas, and backs every replica
// off after a 429 without Retry-After (see Transport.Backoff); it never
// retries (Transport.Retries is 0). It is safe for concurrent use.
func (t *Throttler) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return &Transport{Base: next, Route: t.Route()}
}

// Route returns a Transport.Route that sends every request through t; nil
// for a nil or zero Throttler (a Transport without a Route fails its
// requests).
func (t *Throttler) Route() func(*http.Request) *Throttler {
	if t == nil || t.st == nil {
		return nil // a Transport without a Route fails its requests
	}
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
//     Throttler for every replica until then (see Throttler.PauseUntil),
//     at most MaxPause;
//   - with Counters set, what the API says of its own quota on every
//     response is followed as well, for every replica (see Counters; a
//     Transport with Cost takes its refusals only);
//   - a 429 that says nothing Counters can read (no Retry-After, no
//     counter at zero) backs every replica off (see Backoff); a 503 that
//     says nothing is this call's alone, retried with Retries as a
//     RetryCall, and pauses no one;
//   - with LimitHeader set, a response stating a lower limit than the
//     Throttler's lowers it for every replica (see Throttler.LowerLimit).
//
// A call's slot holds where the API counts it: when its request is
// written. The Transport hands Base the request on a context that carries
// an httptrace.ClientTrace (composed with any trace already there); its
// GotConn, which net/http calls in the sending goroutine right before it
// writes the request (HTTP/1) or opens its stream (HTTP/2), checks the
// slot. A connection that came before the slot holds the write until
// then; one within the slot's allowance (see WithBuffer) lets it go; one
// that came later (a dial, TCP and TLS to an API far away, or a wait for
// a pooled connection) has the call give its slot back and take a new
// one, ahead of the calls waiting for their first, while it holds the
// connection, and the write goes on the new slot. So that dials are made
// while calls wait, not after their slots, the Transport hands a request
// on ahead of its slot, by as long as the Throttler's recent calls took
// to get their connections (their 90th percentile, at most 500ms), and a
// shared pause or a lowered limit that comes meanwhile has the call take
// a new slot, as its wait would have; a call admitted without Redis
// (FailOpen, FallbackLocal), which has no score to be held to, is handed
// on at its slot. A call that cannot get a new slot in time (its context ends,
// or the earliest slot lies past its deadline) is written all the same,
// for net/http writes a request once it holds its connection: its slot
// goes back and its units count as debt at the time it goes (see
// Permit.Settle), so that later calls count it where the API does.
// Stats.Sends (Delay, Reslotted, SentLate), and Observer.Sent, report what
// the connections cost; a Throttler whose calls keep taking new slots
// logs a warning once (see WithLogger). A Base that is not net/http's, or
// does not call GotConn, is not held: its calls go when handed on. Nested
// Transports hold their request once, until every slot holds.
//
// Like RoundTripper, it keeps to net/http's contract except that it
// interprets responses: it reads the status and headers named above (and,
// when Counters asks, the first bytes of a refusal's body, which the caller
// then reads unchanged), and with Retries set it answers a refusal itself
// by sending the request again, which the contract leaves to the client.
// It never modifies the request (Base gets a shallow copy, on the context
// above; a retry sends a clone with a fresh body),
// and closes the request body on every path where it does not hand it to
// Base. It returns Base's response (the last one, when it retries)
// unchanged, but for its Body, which it wraps, passing the same bytes
// through, when the Throttler has WithInFlight, the request is priced by
// Cost, or Counters peeks at the body. A request whose body cannot be
// replayed is never sent twice. A Transport is safe for concurrent use;
// do not change its fields once in use, nor copy it.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport, looked up
	// at each request.
	Base http.RoundTripper

	// Route picks the Throttler for a request, by host, path or anything
	// else in it; a nil result sends the request unthrottled. Route must be
	// set: without it, RoundTrip fails every request with an error
	// wrapping ErrInvalidArgument (rather than send them all unthrottled).
	Route func(*http.Request) *Throttler

	// Tenant, when set, names the tenant of each request whose context
	// carries none (see ContextWithTenant): by a header, the path, or
	// anything else in it; "" (a header that is missing) is no tenant. A
	// request's context wins over Tenant, the empty tenant's too: a
	// request made with ContextWithTenant(ctx, "") is of no tenant, and
	// Tenant is not asked. Nil (the default): a request's tenant is its
	// context's.
	Tenant func(*http.Request) string

	// Retries is how many times a refused request is sent again: one
	// whose refusal paused the Throttler (a 429, a 503 with Retry-After,
	// or a Pause read by Counters) once the pause is over and the
	// Throttler admits it again; one whose refusal concerned it alone
	// (RetryCall) after 100ms, doubled at each attempt (at most 2s), and
	// admitted again. Only requests without a body, or whose GetBody can
	// make a fresh one, are retried; the others get the refusal. Default
	// 0: the response is returned as it came.
	//
	// With nested Transports (one whose Base is another Transport, such
	// as tokens with Cost over requests), set Retries on the outer one
	// only, the one a request meets first, and give both Counters that
	// read the API's refusals (the same preset), so that both pause on
	// them. A retry there is admitted anew on every Transport below, at
	// its own time: the refused attempt gives its estimate back (a
	// refusal settles at 0, see Cost) and each send counts once on every
	// limit.
	// On the inner one, a retry would go out under the outer permit's
	// first admission, a pause or more after it, when the outer window no
	// longer holds the call where the API counts it; on both, the sends
	// multiply: each outer attempt makes up to Retries+1 inner ones.
	Retries int

	// MaxPause caps how long one refusal may pause the Throttler: a
	// Retry-After, a back-off (see Backoff), and a counter at zero until
	// its reset, except that a pause until a reset is capped at the
	// Throttler's interval when that is longer: GitHub's reset, up to an
	// hour away, holds every replica until then, rather than letting a
	// call per replica go every MaxPause to be refused again. Default 15
	// minutes.
	MaxPause time.Duration

	// Counters, when set, reads what the API says of its own quota on
	// every response, and the Transport follows it for every replica of
	// the Throttler, through Redis:
	//
	//   - a Pause verdict pauses every replica until Quota.Until, or, when
	//     the response does not say until when, for Backoff, doubled when
	//     the API refuses again within a back-off's length after the last
	//     one ended (read from Redis, so it grows across replicas);
	//   - a RetryCall verdict pauses no one (see Retries);
	//   - Remaining 0 pauses every replica until Reset when the counter
	//     is a fixed window; a gradual one (Quota.Gradual) holds them to
	//     the calls of ours it counts, which free up as they age out;
	//   - Remaining below what our window leaves lowers the Throttler's
	//     first limit (see Throttler.LowerLimit) to the calls of ours the
	//     API had counted plus Remaining, so that, of the calls admitted
	//     once every replica has learned of it, at most Remaining go
	//     before Reset; a fixed window's limit holds until Reset and only
	//     goes down within one reset, after which our own window rules
	//     again; a gradual counter's is the least its readings of the last
	//     interval imply. The limit is never raised above New's.
	//
	// The first limit's interval must be the API's window (an hour for
	// GitHub's 5000 an hour). Following a counter takes one Redis round
	// trip per response whose Remaining is below New's limit, and per
	// response while this process knows of a lowering in force (to count
	// the calls of ours the API has counted, compare and write, in one
	// script), and a pause write as well when a reading leaves nothing; a
	// fixed counter at zero takes a pause write instead. At most one such round
	// trip runs at a time per Transport and Throttler: responses read
	// while one is under way leave their readings to be applied together
	// next.
	// A lowered limit is published to every replica as it is written, and
	// calls sleeping toward slots reserved under the higher one reserve
	// again. The bound is exact only for calls admitted once the lowered
	// limit reached their replica (calls already sent are not recalled),
	// and a call of ours that reached the API after the request that read
	// the counter although scored before it counts as though the API had
	// counted it: the limit is then too high by such calls until a later
	// response lowers it. Nothing can foresee what another consumer spends
	// beyond what the responses showed. Use Counters or LimitHeader, not
	// both: both set the shared limit.
	//
	// A Transport with Cost takes only the verdicts of what Counters reads
	// (pauses, back-offs, RetryCall) and follows no counter: its window
	// holds estimates until they settle, so what it holds is not what the
	// API's counter counts, and the presets' counters are of requests.
	// Give it the preset of the request Transport below it, so that a
	// refusal pauses both. Nil (the default): only Retry-After is read, as
	// described above.
	Counters counters.Counters

	// Backoff is how long a refusal that does not say until when (a bare
	// 429, or a Pause without Until read by Counters) pauses every replica
	// at first, doubled each time the API refuses again within a
	// back-off's length after the last one ended, whichever replica reads
	// it, at most MaxPause. Default (zero): what the API asks, as the
	// Quota's own Backoff states it (a minute for GitHub's secondary rate
	// limits), and 1 second when it asks nothing; a Backoff set here wins
	// over what the API asks.
	Backoff time.Duration

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

	followers sync.Map                          // *Throttler -> *follower, for Counters
	obs       atomic.Pointer[TransportObserver] // AddObserver's, joined; nil when none
}

// RoundTrip implements http.RoundTripper. A nil Transport, or one without
// a Route, fails the request with an error wrapping ErrInvalidArgument
// and closes its body, as the RoundTripper contract asks.
func (tr *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if tr == nil || tr.Route == nil {
		closeBody(req)
		return nil, invalidf("Transport: no Route: set Route to pick each request's Throttler (Throttler.Route for one)")
	}
	t := tr.Route(req)
	if t == nil {
		return tr.base().RoundTrip(req)
	}
	if tr.Tenant != nil {
		if !tenantSet(req.Context()) {
			if tenant := tr.Tenant(req); tenant != "" {
				req = req.WithContext(ContextWithTenant(req.Context(), tenant))
			}
		}
	}
	send := req
	for try := 0; ; try++ {
		permit, err := tr.admit(t, send)
		if err != nil {
			closeBody(send)
			return nil, err
		}
		sent := t.now()
		resp, err := tr.base().RoundTrip(send.WithContext(gateSend(send.Context(), t, permit)))
		if err != nil {
			permit.Done() // it keeps its estimate: the request may have reached the API
			return nil, err
		}
		var body []byte
		if tr.Counters != nil && tr.Counters.Peek(resp) {
			body = peekBody(resp) // before endOnRead: the caller's reads settle, not ours
		}
		verdict, refused := tr.learn(t, req, resp, body, sent, permit.score)
		if tr.Cost != nil || t.lease != nil {
			// The call ends once its body is read: a place in flight goes
			// back, a cost is settled (at 0 for a refusal, by the verdict).
			endOnRead(req, resp, permit, tr.Cost, refused)
		}
		if verdict == counters.Proceed {
			return resp, nil
		}
		at := t.now() // before a RetryCall's delay
		next := tr.retry(req, verdict, try)
		tr.refused(req, Refusal{Throttler: t, StatusCode: resp.StatusCode, Verdict: verdict, Attempt: try, Retry: next != nil, At: at})
		if next == nil {
			return resp, nil
		}
		drain(resp)
		send = next
	}
}

// retry returns the request to send again after the try-th send of req
// was refused with verdict, once a RetryCall's delay has passed; nil when
// it is not to go again: Retries are spent, its body cannot be made
// afresh, or its context ended during the delay.
func (tr *Transport) retry(req *http.Request, verdict counters.Verdict, try int) *http.Request {
	if try >= tr.Retries || !replayable(req) {
		return nil
	}
	if verdict == counters.RetryCall && !sleepCtx(req.Context(), retryCallDelay(try)) {
		return nil
	}
	// The fresh body only once the request is sure to go again: one
	// made and dropped might hold a file open.
	next, err := retryRequest(req)
	if err != nil {
		return nil // no fresh body: the caller gets the refusal itself
	}
	return next
}

// CloseIdleConnections closes the idle connections of Base, when it has
// such a method (as http.Transport does), so that http.Client's
// CloseIdleConnections reaches through the Transport.
func (tr *Transport) CloseIdleConnections() {
	if c, ok := tr.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (tr *Transport) base() http.RoundTripper {
	if tr.Base != nil {
		return tr.Base
	}
	return http.DefaultTransport
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
