package throttler

import (
	"context"
	"net/http/httptrace"
	"slices"
	"sync"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// Sending on time: a call's slot must hold where the API counts the call,
// when its request is written, not when it is handed to the next
// RoundTripper. Between the two, net/http may dial a connection (TCP and
// TLS: one to three round trips to the API) or wait for one of its pool
// to come free; calls admitted in time then reach the API late, while
// those that found a connection ready go at once, and the two can land in
// one window of the API.
//
// So a call sent through net/http waits at its connection. httptrace's
// GotConn, which net/http calls in the goroutine that sends the request,
// right before it writes it (HTTP/1) or opens its stream (HTTP/2), finds
// the call's slot (see gatedCall.hold):
//   - a connection that came within the slot's allowance (half the
//     buffer, less the clock estimate's error, plus any margin: see
//     WithBuffer) lets the write go at once;
//   - one that came later has the call give its slot back and wait for a
//     new one, ahead of the calls that wait for their first (wantFront),
//     while it holds the connection, which no other request can use
//     meanwhile; the write follows the new slot at once;
//   - a call that cannot wait for a new slot (its context ends, or the
//     earliest slot lies past its deadline) is written all the same, for
//     net/http writes a request once it has its connection, whatever its
//     context: its slot goes back and its units count as debt at the time
//     it goes (see Permit.Settle), so that the calls admitted after it
//     count it where the API does. A call held ahead of its slot whose
//     context ends goes at its slot (at most maxLead later), where it
//     counts already.
//
// WroteHeaders marks the write: Stats.Sends.Delay counts how long after its
// slot each call's connection came (a pool too small, or a buffer too
// short for the API's distance, shows there), and the send is reported to
// the Observers (Observer.Sent) and to the sends' watch (see sendWatch).
// One gate serves a request through nested Transports: the outermost puts
// it on the request's context, the others add their calls to it, and the
// connection is let go once every call's slot holds at once.
//
// A call that takes a new slot at its connection goes later than the slot
// it had, and the window frees the slot that much later too: where calls
// keep dialing (a pool smaller than a burst, as Go's default of two idle
// connections per host is for most), every window would start that much
// later, and the quota go that much less used. So a Transport hands its
// request on ahead of its slot, by as long as recent calls of its
// Throttler took to get their connections (sendLead: the 90th percentile
// of the last 64, at most maxLead), and the gate holds the write from the
// connection until the slot: the dial is made while the call waits. The
// gate then also does what the call's own wait does at its slot: a
// shared pause that began, or a limit lowered, since the slot was reserved
// has the call take a new slot. Only a slot reserved through Redis is
// handed on ahead: a call admitted without Redis (FailOpen, FallbackLocal's
// local share) has no score for the gate to hold it to, and is handed on
// at its slot (see waiter.leadFor).

type gateKey struct{}

// sendGate holds one request at its connection until the slots of the
// calls it stands for hold. Its fields are guarded by mu; GotConn holds mu
// while it waits, and WroteHeaders, which comes after, takes it.
type sendGate struct {
	mu       sync.Mutex
	calls    []*gatedCall
	written  bool // its headers were written: nothing more to hold or measure
	answered bool // a response's first byte came after the write
}

// gatedCall is one call a gate holds: its Throttler and permit, and the
// context a new slot is waited for with (the request's, as its Transport
// saw it).
type gatedCall struct {
	t      *Throttler
	p      *Permit
	ctx    context.Context
	handed time.Time // when the request was handed on, by t's clock

	delay     time.Duration // how long after its first slot its connection came
	measured  bool          // delay is known
	reslotted bool          // it took a new slot at its connection
	late      bool          // written past its allowance all the same
}

// maxGatePasses bounds how many times a gate looks at its calls again once
// one of them took a new slot (which may make another late): past that,
// the request goes as it stands, and a call written late is counted so.
const maxGatePasses = 3

// gateSend returns ctx with p's call, admitted by t, held at the
// connection of a request made with it through net/http (see above). A
// permit admitted without Redis has no score to keep: ctx comes back as it
// was (its wait returned at its slot, not ahead of it: see waiter.leadFor).
func gateSend(ctx context.Context, t *Throttler, p *Permit) context.Context {
	if p.score == 0 {
		return ctx
	}
	c := &gatedCall{t: t, p: p, ctx: ctx, handed: t.now()}
	if g, _ := ctx.Value(gateKey{}).(*sendGate); g != nil && g.join(c) {
		return ctx
	}
	g := &sendGate{calls: []*gatedCall{c}}
	ctx = context.WithValue(ctx, gateKey{}, g)
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: g.gotConn, WroteHeaders: g.wroteHeaders, GotFirstResponseByte: g.gotResponse})
}

// join adds c to g, unless g's request was written already: a request
// made afterwards with its context is another send.
func (g *sendGate) join(c *gatedCall) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.written {
		return false
	}
	g.calls = append(g.calls, c)
	return true
}

// gotConn holds the request until every call's slot holds (see hold).
// net/http may call it more than once for one request (a connection that
// failed before the write is replaced): each connection is held anew. A
// connection that comes after the request was written and before any
// response is a second write of it (see again); after a response, it is
// another request made with the same context, which goes as it is (see
// Do).
func (g *sendGate) gotConn(httptrace.GotConnInfo) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.answered {
		return
	}
	if g.written {
		for _, c := range g.calls {
			c.again()
		}
		return
	}
	for range maxGatePasses {
		held := true
		for _, c := range g.calls {
			if !c.hold() {
				held = false
			}
		}
		if held {
			return
		}
	}
}

// wroteHeaders counts the send: once, for the first write.
func (g *sendGate) wroteHeaders() {
	g.mu.Lock()
	if g.written {
		g.mu.Unlock()
		return
	}
	g.written = true
	calls := g.calls
	g.mu.Unlock()
	for _, c := range calls {
		c.sent()
	}
}

// gotResponse notes that a response came: the request was read.
func (g *sendGate) gotResponse() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.answered = g.written
}

// hold keeps c's call to its slot as its connection comes, and reports
// whether the call may be written now on the slot it had when hold began.
// It sleeps on while the slot is still ahead by the clock estimate as it
// stands (which may have changed since the call was admitted); it takes a
// new slot when the connection came past the allowance (see reslot), and
// reports false, so that the gate looks at every call again.
func (c *gatedCall) hold() bool {
	t, p := c.t, c.p
	if p.score == 0 {
		return true // counted where it goes already (see reslot)
	}
	if !c.measured {
		now := t.now()
		c.measured, c.delay = true, now.Sub(t.clock.Local(p.score))
		t.sends.took(now.Sub(c.handed))
	}
	for {
		t.mu.Lock()
		target, late := t.offScore(reservation{score: p.score, margin: p.margin}, t.clock)
		if t.shared.paused(t.clock.Server(t.now())) || (p.limitGen != t.shared.limitGen && !p.immediate) {
			// As a call's own wait at its slot (see toSlot): a shared
			// pause in force, or a limit lowered since the slot was
			// reserved, which a slot reserved ahead may not fit.
			t.mu.Unlock()
			c.reslotted = true
			if err := p.reslot(c.ctx); err != nil {
				c.late = true
			}
			return false
		}
		t.mu.Unlock()
		if !target.IsZero() {
			// Ahead of the slot: handed on early (see sendLead), or an
			// estimate corrected since. net/http writes the request once
			// this returns, whatever its context: one whose context
			// ends now still goes at its slot, where it counts, rather
			// than at once, where it would not. Only a slot further off
			// than any lead (a clock step) gives way to the context.
			if d := target.Sub(t.now()); d <= maxLead+time.Duration(t.rules.EarlyTolerance())*time.Microsecond {
				time.Sleep(d)
			} else if !sleepCtx(c.ctx, d) {
				c.late = true
				p.sendAnyway(c.ctx)
				return true
			}
			continue
		}
		if late <= 0 {
			return true
		}
		c.reslotted = true
		if err := p.reslot(c.ctx); err != nil {
			c.late = true
		}
		return false
	}
}

// sent counts c's call as written now.
func (c *gatedCall) sent() {
	t, p := c.t, c.p
	if !c.measured && p.score != 0 {
		// A RoundTripper that reported the write but not the connection.
		c.measured, c.delay = true, t.now().Sub(t.clock.Local(p.score))
	}
	if !c.late && p.score != 0 {
		// Held on time, and late all the same: an HTTP/2 stream that
		// waited for the server to allow one more after GotConn.
		t.mu.Lock()
		_, late := t.offScore(reservation{score: p.score, margin: p.margin}, t.clock)
		t.mu.Unlock()
		c.late = late > 0
	}
	t.stats.sent(t.now(), SendInfo{Delay: c.delay, Reslotted: c.reslotted, Late: c.late})
}

// again holds c's call, written once already, until a slot of its own
// for a second write. net/http writes an idempotent request again on a new
// connection when the one it was written on turns out closed (a server
// that closed an idle connection as it was reused, a reset before the
// response): the server may not have read the first write, or may have
// read and counted it, and nothing tells which. So the second write is
// another call: it waits, ahead of the calls that wait for their first,
// for a slot of its own, and keeps the first's, which counts the first
// write wherever it went. When no slot comes (ctx ends, or the earliest
// slot lies past its deadline), it is written all the same and counts as
// debt where it goes (Late).
func (c *gatedCall) again() {
	t, p := c.t, c.p
	info := SendInfo{Reslotted: true, Rewritten: true}
	if _, _, err := t.waitSlot(c.ctx, "send", p.estimate, wantFront, 0); err != nil {
		_ = t.addDebt(c.ctx, debtNow(t), p.estimate, t.opt.order.debtMark(c.ctx, p.members))
		info.Late = true
	}
	t.stats.sent(t.now(), info)
}

// reslot gives back p's slot, whose request came to its connection
// later than the slot allows, and waits with ctx for a new one, ahead of
// the calls that wait for their first; p keeps its place in flight. The
// slot goes back with the round trip that claims the new one, which frees
// it before it counts. When no new slot comes (ctx ends, or the earliest
// slot lies past its deadline), the call is written all the same (see
// sendAnyway), and reslot returns the wait's error.
func (p *Permit) reslot(ctx context.Context) error {
	t := p.t
	p.unslot(ctx, false)
	res, _, err := t.waitSlot(ctx, "send", p.estimate, wantFront, 0)
	if err != nil {
		p.countAnyway(ctx)
		// No round trip claims a new slot: one of its own gives the
		// old one back.
		t.mu.Lock()
		t.worker.start(&t.owed)
		t.mu.Unlock()
		return err
	}
	p.score, p.margin, p.members, p.limitGen, p.immediate = res.score, res.margin, res.members, res.limitGen, res.immediate
	return nil
}

// sendAnyway counts p's call, about to be written off its slot, where it
// goes: its slot goes back, its units count as debt now.
func (p *Permit) sendAnyway(ctx context.Context) {
	p.unslot(ctx, true)
	p.countAnyway(ctx)
}

// unslot gives back the slot p holds: it leaves the journal and the free
// slots this process knows of at once, and Redis with the next round trip
// (written for sure: see core.Attempt.GiveBack), which start has a worker
// make when no wait of the caller's follows to make it.
func (p *Permit) unslot(ctx context.Context, start bool) {
	t := p.t
	t.mu.Lock()
	defer t.mu.Unlock()
	t.health.forget(p.members, &t.hooks)
	t.known.Free(p.score, p.estimate, PriorityFromContext(ctx).level())
	for _, m := range p.members {
		t.owed.returnLater(core.Entry{Score: p.score, Member: m})
	}
	if start {
		t.worker.start(&t.owed)
	}
	p.score, p.members = 0, nil
}

// countAnyway counts the units of p, which holds no slot, as debt at the
// server's time now (see debtNow), where its call is about to go; p then
// holds nothing to settle (see Permit.Settle). A worker writes what Redis
// did not take (see addDebt).
func (p *Permit) countAnyway(ctx context.Context) {
	t := p.t
	_ = t.addDebt(ctx, debtNow(t), p.estimate, t.opt.order.debtMark(ctx, p.members))
	p.score, p.members = 0, nil
}

// sendLead is how long a Transport's calls took to get their connections
// once handed on, lately: how long before its slot a call is handed on,
// so that it need not take a new slot for a dial (see above).
type sendLead struct {
	mu    sync.Mutex
	waits []time.Duration // the last leadSamples, a ring
	next  int
}

// leadSamples is how many sends sendLead looks at, and maxLead the most
// ahead of its slot it hands a call on: a connection held idle that long
// before its write is one the pool cannot lend.
const (
	leadSamples = 64
	maxLead     = 500 * time.Millisecond
)

// took notes that a call got its connection d after it was handed on.
func (l *sendLead) took(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waits) < leadSamples {
		l.waits = append(l.waits, d)
		return
	}
	l.waits[l.next] = d
	l.next = (l.next + 1) % leadSamples
}

// lead is how long before its slot to hand a call on: the 90th percentile
// of the last sends' waits for their connections, at most maxLead; none
// before a tenth of leadSamples were seen.
func (l *sendLead) lead() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waits) < leadSamples/10 {
		return 0
	}
	s := slices.Clone(l.waits)
	slices.Sort(s)
	return min(max(s[len(s)*9/10], 0), maxLead)
}
