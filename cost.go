package throttler

import (
	"context"
	"io"
	"net/http"
	"sync"
)

// Cost prices a Transport's requests when a call's cost is known only from
// its response, as an LLM API's tokens are. Each request reserves its
// estimate (see Estimate) in units of the Throttler (see Throttler.Acquire);
// once the caller has read the response body to its end, or closed it, the
// permit is settled (see Permit.Settle) with what the call cost: a surplus
// goes back to every replica at once, an excess counts as debt.
//
// What a call cost comes from Actual, but for a refusal, which is settled
// at 0 without asking Actual, since the API refused the call before doing
// its work: a 429 (Too Many Requests), and any response the Transport's
// Counters give a verdict (Pause or RetryCall), whatever its status, or
// without Counters the default reading gives one (a 429 or 503 with
// Retry-After). A 503 with Retry-After settles at 0, then, and so does a
// GitHub 403 for a secondary rate limit under counters.GitHub(), and a
// Stripe lock_timeout under counters.Stripe(). Any other response asks
// Actual, and keeps its estimate when Actual cannot tell: a 500, a 503
// that states nothing and that the Counters give no verdict (which the
// Transport retries alone, see Transport, but which may have counted), or
// Anthropic's 529 (overloaded_error), which
// counters.Anthropic() does not read as a refusal (Anthropic's "Errors" page puts
// it down to high traffic across all users, not to the organization's
// limits, and does not say whether such a call counts against them, so
// its estimate is kept). A refused call thus holds nothing once its body
// is closed, and a retry (see Transport.Retries) reserves its estimate
// anew, at its own time, instead of counting twice.
//
// The body is not buffered and what the caller reads is unchanged: Actual
// sees the last TailBytes bytes the caller read, where a JSON body's usage
// and a streamed response's last event are. The read that reaches the end
// of the body, or Close, makes the settle's Redis call, if any (see
// Permit.Settle), and with WithInFlight one more to give the place back
// (see Permit.Done), each bounded by the Redis timeout. A request whose
// round trip fails keeps its estimate: it may have reached the API. So
// does one written off its slot (its connection came too late and it
// could not wait for a new one, see Transport): its estimate counts as
// debt where it went, and its settle, a refusal's included, changes
// nothing.
//
// With nested Transports (a Transport with Cost whose Base is another
// Transport, such as one of requests), set Retries on the outer one only:
// see Transport.Retries.
type Cost struct {
	// Estimate returns the units to reserve for req: at least 1 and at
	// most the smallest limit in force times the share of the request's
	// priority, rounded down, or 1 if that is less (see Throttler.AllowN);
	// otherwise the request fails with an error wrapping
	// ErrInvalidArgument. Nil: each request reserves the cost its context
	// carries (see ContextWithCost), and a request whose context carries
	// none fails with an error wrapping ErrInvalidArgument. An Estimate
	// that should honour a cost the caller put on the context reads it
	// with CostFromContext.
	Estimate func(req *http.Request) int
	// Actual returns what the call cost, from the response and the last
	// bytes of its body as the caller read them, and false when it cannot
	// tell: the estimate then stands. It is not asked of a refusal (see
	// above), which settles at 0. Nil: every call but a refused one keeps
	// its estimate.
	Actual func(resp *http.Response, tail []byte) (cost int, ok bool)
	// TailBytes is how many of the body's last bytes Actual sees. Default
	// 64KiB.
	TailBytes int
}

// admit waits for req's quota: one call, or with Cost its estimate, and
// with WithInFlight a place in flight, checked on time right before it
// returns (see reserveToSend). It returns the permit that ends the call.
func (tr *Transport) admit(t *Throttler, req *http.Request) (*Permit, error) {
	if tr.Cost == nil {
		return t.reserveToSend(req.Context(), "Transport", 1, t.sends.lead())
	}
	var (
		n  int
		ok bool
	)
	if tr.Cost.Estimate != nil {
		n, ok = tr.Cost.Estimate(req), true
	} else {
		n, ok = CostFromContext(req.Context())
	}
	if !ok {
		return nil, invalidf("Transport.Cost: Estimate is nil and the request's context carries no cost (see ContextWithCost)")
	}
	return t.reserveToSend(req.Context(), "Transport", n, t.sends.lead())
}

type costKey struct{}

// ContextWithCost returns a copy of ctx that carries n, the cost of the
// call a request made with it stands for, in the units of the Throttler
// that prices it: a Transport whose Cost has no Estimate reserves n units
// for such a request (see Cost.Estimate). It is for a caller that knows
// what its call may cost (an LLM call's prompt tokens plus its max_tokens,
// a GraphQL query's requested cost) where the request alone does not say
// it plainly. n is checked when the request is sent, as an estimate is: a
// request carrying n below 1, or above what its Throttler can admit at
// once, fails with an error wrapping ErrInvalidArgument. Every Transport
// whose Cost has no Estimate reads the same n: with nested Transports of
// different units, give each but one an Estimate.
func ContextWithCost(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, costKey{}, n)
}

// CostFromContext returns the cost ctx carries (see ContextWithCost), and
// false when it carries none.
func CostFromContext(ctx context.Context) (int, bool) {
	n, ok := ctx.Value(costKey{}).(int)
	return n, ok
}

// endOnRead makes resp's body end p's call once the caller has read it to
// the end or closed it: with c, settled at 0 when refused (see unread),
// else with c.Actual's cost when it gives one; and its place in flight
// given back.
func endOnRead(req *http.Request, resp *http.Response, p *Permit, c *Cost, refused bool) {
	settle := func(tail []byte) {
		defer p.Done()
		if c == nil {
			return
		}
		// The caller's context may have ended with the read: the cost is
		// for every replica.
		ctx := context.WithoutCancel(req.Context())
		if refused {
			p.Settle(ctx, 0) // the API did none of the call's work
			return
		}
		if c.Actual == nil {
			return
		}
		if n, ok := c.Actual(resp, tail); ok {
			p.Settle(ctx, max(0, n))
		}
	}
	if resp.Body == nil {
		settle(nil)
		return
	}
	max := 0 // without Actual, or for a refusal, nothing of the body is kept
	if c != nil && c.Actual != nil && !refused {
		max = c.TailBytes
		if max <= 0 {
			max = 64 << 10
		}
	}
	resp.Body = &settlingBody{rc: resp.Body, max: max, settle: settle}
}

// settlingBody passes a response body through, keeping its last max bytes,
// and settles once it is read to the end or closed.
type settlingBody struct {
	rc     io.ReadCloser
	max    int
	tail   []byte
	settle func(tail []byte)
	once   sync.Once
}

func (b *settlingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.keep(p[:n])
	if err == io.EOF {
		b.done()
	}
	return n, err
}

func (b *settlingBody) Close() error {
	err := b.rc.Close()
	b.done()
	return err
}

// keep appends read bytes to the tail, dropping what is older than the last
// max bytes (in steps, so each byte is copied at most twice).
func (b *settlingBody) keep(p []byte) {
	if b.max == 0 {
		return
	}
	if len(p) >= b.max {
		b.tail = append(b.tail[:0], p[len(p)-b.max:]...)
		return
	}
	b.tail = append(b.tail, p...)
	if len(b.tail) > 2*b.max {
		b.tail = append(b.tail[:0], b.tail[len(b.tail)-b.max:]...)
	}
}

func (b *settlingBody) done() {
	b.once.Do(func() {
		tail := b.tail
		if len(tail) > b.max {
			tail = tail[len(tail)-b.max:]
		}
		b.settle(tail)
	})
}
