package throttler

import (
	"context"
	"io"
	"net/http"
	"sync"
)

// Cost prices a Transport's requests when a call's cost is known only from
// its response, as an LLM API's tokens are. Each request reserves
// Estimate(req) units (see Throttler.Reserve); once the caller has read the
// response body to its end, or closed it, Actual reads what the call cost
// and the permit is settled (see Permit.Settle): a surplus goes back to
// every replica at once, an excess counts as debt.
//
// The body is not buffered and what the caller reads is unchanged: Actual
// sees the last TailBytes bytes the caller read, where a JSON body's usage
// and a streamed response's last event are. The read that reaches the end
// of the body, or Close, makes the settle's Redis call, if any (see
// Permit.Settle), and with WithInFlight one more to give the place back
// (see Permit.Done), each bounded by the Redis timeout. A request whose
// round trip fails keeps its estimate: it may have reached the API.
type Cost struct {
	// Estimate returns the units to reserve for req: at least 1 and at
	// most the smallest limit in force times the share of the request's
	// priority, rounded down, or 1 if that is less (see Throttler.AllowN);
	// otherwise the request fails with an error wrapping
	// ErrInvalidArgument. Required.
	Estimate func(req *http.Request) int
	// Actual returns what the call cost, from the response and the last
	// bytes of its body as the caller read them, and false when it cannot
	// tell: the estimate then stands. Nil: every call keeps its estimate.
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
		return t.reserveToSend(req.Context(), "Transport", 1)
	}
	if tr.Cost.Estimate == nil {
		return nil, invalidf("Transport.Cost: Estimate must be set")
	}
	return t.reserveToSend(req.Context(), "Transport", tr.Cost.Estimate(req))
}

// endOnRead makes resp's body end p's call once the caller has read it to
// the end or closed it: settled with c.Actual's cost, when c gives one,
// and its place in flight given back.
func endOnRead(req *http.Request, resp *http.Response, p *Permit, c *Cost) {
	settle := func(tail []byte) {
		defer p.Done()
		if c == nil || c.Actual == nil {
			return
		}
		if n, ok := c.Actual(resp, tail); ok {
			// The caller's context may have ended with the read: the cost
			// is for every replica.
			p.Settle(context.WithoutCancel(req.Context()), max(0, n))
		}
	}
	if resp.Body == nil {
		settle(nil)
		return
	}
	max := 0 // without Actual, nothing of the body is kept
	if c != nil && c.Actual != nil {
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
