package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"
)

// errConnClosed is what a request whose connection was closed before it
// was written answers (closed by a hook of the request's trace).
var errConnClosed = errors.New("sim: the API connection was closed before the request was written")

// errDead is what a killed process's request answers: it is never written.
var errDead = errors.New("sim: the process was killed before the request was written")

// API is the third-party API the replicas' HTTP requests go to, and their
// connections to it, as net/http's Transport would hold them: Base returns
// the http.RoundTripper a replica's requests go through, in virtual time.
//
// A request first gets a connection. Without a fault it has one at once (a
// warm connection). During a ConnSetup fault on its replica's link the
// link keeps at most a few idle connections (a small pool, emptied when
// the fault begins): a request takes one if there is one, warm, and
// otherwise dials a new one, cold, which takes a setup time drawn per
// request (TCP and TLS handshakes, or a wait for a connection). Once it
// has its connection, the request's httptrace.ClientTrace (if its context
// carries one) hears GotConn, synchronously, as from net/http; the request
// is written at once after it returns (WroteHeaders, WroteRequest), unless
// the hook closed the connection, and reaches the API one way later. The
// API answers at once, 200 with an empty body; the answer takes one way
// back. The connection goes back to the pool when the body is closed.
//
// The one-way delay is the same for every request of a run, and for a call
// made with Wait, which goes at its admission: it shifts every arrival
// alike, and so changes no window's count at the API. An API is safe for
// concurrent use.
type API struct {
	rec    *Recorder
	oneWay time.Duration

	mu    sync.Mutex
	links []*apiLink // per replica

	written, cold, held atomic.Int64 // requests written, dialled cold, held in GotConn
}

// apiLink is one replica machine's connections to the API.
type apiLink struct {
	until time.Time     // a ConnSetup fault acts until then...
	d     time.Duration // ...cold connections take 0..d to set up...
	keep  int           // ...and the pool keeps at most this many idle
	idle  int           // idle connections in the pool now
	rng   *rand.Rand    // draws the setup times
}

// NewAPI returns the API of a run with replicas replicas, whose requests
// reach it oneWay after they are written; the setup times of cold
// connections are drawn from sources seeded by seed.
func NewAPI(rec *Recorder, replicas int, oneWay time.Duration, seed uint64) *API {
	a := &API{rec: rec, oneWay: oneWay, links: make([]*apiLink, replicas)}
	for i := range a.links {
		a.links[i] = &apiLink{rng: rand.New(rand.NewPCG(seed, 0x617069<<16|uint64(i)))}
	}
	return a
}

// OneWay is the delay from a request's write to its arrival at the API.
func (a *API) OneWay() time.Duration { return a.oneWay }

// String sums up the requests so far: how many were written, how many
// set up a new connection during a fault, and how many the library held
// at their connection (their GotConn took virtual time).
func (a *API) String() string {
	return fmt.Sprintf("%d HTTP requests written, %d on new connections, %d held at their connection",
		a.written.Load(), a.cold.Load(), a.held.Load())
}

// ConnSetup arms the fault of that name on replica's link for the next
// span: its idle connections are gone, it keeps at most keep idle ones,
// and each new connection takes a setup time drawn from 0 to d.
func (a *API) ConnSetup(replica int, span, d time.Duration, keep int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.links[replica]
	l.until, l.d, l.keep, l.idle = time.Now().Add(span), d, keep, 0
}

// take gets a connection on link for a request: how long it takes to set
// up (0 for a warm one), and whether a ConnSetup fault acts on link.
func (a *API) take(link int) (setup time.Duration, cold, fault bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.links[link]
	if !time.Now().Before(l.until) {
		return 0, false, false
	}
	if l.idle > 0 {
		l.idle--
		return 0, false, true
	}
	return time.Duration(l.rng.Int64N(int64(l.d) + 1)), true, true
}

// put returns a connection to link's pool, which keeps it if it has room
// while the fault acts.
func (a *API) put(link int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.links[link]
	if time.Now().Before(l.until) && l.idle < l.keep {
		l.idle++
	}
}

// Base returns the http.RoundTripper of process id, running on replica
// link's machine; alive reports that the process still lives (a killed
// process writes nothing). Requests whose contexts carry an HTTPCall (see
// WithHTTPCall) record in it what became of them.
func (a *API) Base(id, link int, alive func() bool) *APITransport {
	return &APITransport{api: a, id: id, link: link, alive: alive}
}

// HTTPCall is what became of the HTTP request of one call: when it reached
// Base, and each time it was written. Read it once the request returned.
type HTTPCall struct {
	mu     sync.Mutex
	seen   bool // the request reached Base
	handed time.Duration
	wrote  []time.Duration
	ctx    context.Context // the last request's, as Base saw it
}

type httpCallKey struct{}

// WithHTTPCall returns a copy of ctx that carries c: a request made with
// it records in c what became of it.
func WithHTTPCall(ctx context.Context, c *HTTPCall) context.Context {
	return context.WithValue(ctx, httpCallKey{}, c)
}

// Handed is when the request first reached Base (virtual time since the
// run began), and whether it did.
func (c *HTTPCall) Handed() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handed, c.seen
}

// Wrote lists when the request was written, once per write: each reached
// the API one way later.
func (c *HTTPCall) Wrote() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.wrote...)
}

// Context is the context of the call's request as Base last saw it, with
// whatever the library put there (nil before the request reached Base).
func (c *HTTPCall) Context() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ctx
}

// APITransport is one process's http.RoundTripper to the API (see API). It
// is safe for concurrent use.
type APITransport struct {
	api   *API
	id    int
	link  int
	alive func() bool
}

// RoundTrip sends req to the API as described on API. It never reads the
// request's body, and closes it.
func (b *APITransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	a, ctx := b.api, req.Context()
	call, _ := ctx.Value(httpCallKey{}).(*HTTPCall)
	if call == nil {
		call = &HTTPCall{}
	}
	handed := a.rec.Since()
	call.mu.Lock()
	if !call.seen {
		call.seen, call.handed = true, handed
	}
	call.ctx = ctx
	call.mu.Unlock()
	trace := httptrace.ContextClientTrace(ctx)
	if trace != nil && trace.GetConn != nil {
		trace.GetConn(req.URL.Host)
	}
	setup, cold, fault := a.take(b.link)
	if fault && !cold {
		a.rec.Note(b.id, "request handed to the API's transport: an idle connection")
	}
	if cold {
		a.cold.Add(1)
		a.rec.Note(b.id, "request handed to the API's transport: no idle connection, a new one takes %s", fmtDur(setup))
		t := time.NewTimer(setup)
		select {
		case <-t.C:
		case <-ctx.Done():
			// As net/http's getConn: the wait for a connection ends
			// with the request's context, before GotConn.
			t.Stop()
			a.rec.Note(b.id, "request abandoned while its connection was set up: %v", context.Cause(ctx))
			return nil, context.Cause(ctx)
		}
	}
	conn := &apiConn{}
	if trace != nil && trace.GotConn != nil {
		start := a.rec.Since()
		trace.GotConn(httptrace.GotConnInfo{Conn: conn, Reused: !cold, WasIdle: !cold})
		if held := a.rec.Since() - start; held > 0 {
			a.held.Add(1)
			a.rec.Note(b.id, "GotConn held the connection %s", fmtDur(held))
		}
	}
	// net/http writes the request right after GotConn, whatever became
	// of the context meanwhile (persistConn.roundTrip hands it to the
	// write loop before it looks at the context): only a closed
	// connection, or a dead process, keeps it from the API.
	if conn.closed.Load() {
		a.rec.Note(b.id, "request not written: its connection was closed in GotConn")
		return nil, errConnClosed
	}
	if !b.alive() {
		return nil, errDead
	}
	wrote := a.rec.Since()
	a.written.Add(1)
	call.mu.Lock()
	call.wrote = append(call.wrote, wrote)
	call.mu.Unlock()
	a.rec.Note(b.id, "request written %s after it was handed over; it reaches the API at %s",
		fmtDur(wrote-handed), fmtDur(wrote+a.oneWay))
	if trace != nil && trace.WroteHeaders != nil {
		trace.WroteHeaders()
	}
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{})
	}
	if rtt := 2 * a.oneWay; rtt > 0 {
		t := time.NewTimer(rtt)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, context.Cause(ctx)
		}
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	return &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: &apiBody{put: func() { a.put(b.link) }},
		Request: req,
	}, nil
}

// apiBody is an answer's empty body; closing it returns the connection to
// its pool, once.
type apiBody struct {
	put  func()
	done atomic.Bool
}

func (b *apiBody) Read([]byte) (int, error) { return 0, io.EOF }

func (b *apiBody) Close() error {
	if !b.done.Swap(true) {
		b.put()
	}
	return nil
}

// apiConn is the connection GotConn is told of: closing it keeps the
// request from being written. Nothing is read or written through it.
type apiConn struct{ closed atomic.Bool }

func (c *apiConn) Read([]byte) (int, error) { return 0, io.EOF }

func (c *apiConn) Write(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	return len(p), nil
}

func (c *apiConn) Close() error                     { c.closed.Store(true); return nil }
func (c *apiConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000} }
func (c *apiConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 443} }
func (c *apiConn) SetDeadline(time.Time) error      { return nil }
func (c *apiConn) SetReadDeadline(time.Time) error  { return nil }
func (c *apiConn) SetWriteDeadline(time.Time) error { return nil }
