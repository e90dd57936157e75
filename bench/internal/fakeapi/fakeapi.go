// Package fakeapi is the third-party API the replicas call: an HTTP server on
// loopback that answers 200 to everything and records when each call arrived
// (time.Now() on arrival, in the harness process), which replica sent it
// and for which tenant, and the times the replica put in its headers (the server time the call
// was counted at, when its Wait returned, when it was sent).
// By default it enforces no rate; the harness works out afterwards what a
// strict sliding-window API would have rejected. With SetInFlight it caps
// the calls it serves at once and holds each one for a while (the inflight
// scenario). StartConfig serves it over TLS, with HTTP/2 or without, and
// can make it enforce a strict sliding window itself (the far scenarios).
package fakeapi

import (
	"context"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ReplicaHeader carries the replica's index (0, 1, ...).
const ReplicaHeader = "X-Bench-Replica"

// The times a replica sends with each call, as decimal integers; a header
// absent or empty is a time not known (the zero Time).
const (
	// ScoreHeader: the server time the call was counted at (this
	// library's Permit.At), in Unix microseconds, Redis's own resolution.
	ScoreHeader = "X-Bench-Score"
	// StartedHeader: when the replica called Wait (or Acquire), in Unix
	// nanoseconds.
	StartedHeader = "X-Bench-Started"
	// ReturnedHeader: when the replica's Wait (or Acquire) returned, in
	// Unix nanoseconds.
	ReturnedHeader = "X-Bench-Returned"
	// SentHeader: right before the replica sent the request, in Unix
	// nanoseconds.
	SentHeader = "X-Bench-Sent"
	// CallHeader: the replica's name for the call, to join what the API
	// saw of it with what the replica recorded (Arrival.Call).
	CallHeader = "X-Bench-Call"
	// TenantHeader: the tenant the call was made for, in the tenants
	// scenarios (Arrival.Tenant).
	TenantHeader = "X-Bench-Tenant"
)

// Arrival is one recorded call.
type Arrival struct {
	At      time.Time
	Replica int
	// End is when a held call's response was decided (zero for a call not
	// held): the call was in flight over [At, End).
	End time.Time
	// OverCap: refused (429) because the in-flight cap was full.
	OverCap bool
	// Score, Started, Returned and Sent are the replica's ScoreHeader,
	// StartedHeader, ReturnedHeader and SentHeader (zero when it sent
	// none). Redis, the replicas and the API run on one machine: these are
	// wall-clock readings of one clock, comparable with At.
	Score, Started, Returned, Sent time.Time
	// NewConn: the call was the first on its connection, which the API
	// accepted at ConnAt (the server's accept loop took it then).
	NewConn bool
	ConnAt  time.Time
	// Refused: answered 429 by the strict window (Config.Limit), and not
	// counted in it.
	Refused bool
	// Call is the request's CallHeader ("" when it had none), and Proto
	// its protocol ("HTTP/1.1", "HTTP/2.0").
	Call, Proto string
	// Tenant is the request's TenantHeader ("" when it had none).
	Tenant string
}

// connInfo is what the API knows of a connection: when it was accepted,
// and how many requests came on it.
type connInfo struct {
	at       time.Time
	requests atomic.Int64 // HTTP/2 serves a connection's requests at once
}

type connKey struct{}

// Stall is a time the API's process did not run a goroutine that asked to
// run every millisecond: from At, for Len past the millisecond. Calls
// that reached the API then were timed when it ran again.
type Stall struct {
	At  time.Time
	Len time.Duration
}

// stallMin is the shortest stall recorded.
const stallMin = 10 * time.Millisecond

// Server is the fake API.
type Server struct {
	URL string
	srv *http.Server
	ln  net.Listener

	stop   chan struct{}
	stalls []Stall // guarded by mu

	mu       sync.Mutex
	arrivals []*Arrival
	limit    int           // SetInFlight's cap; 0: none, and calls are not held
	holdMin  time.Duration // each call held for a uniform time in [holdMin, holdMax]
	holdMax  time.Duration
	inFlight int

	strict   int           // Config.Limit; 0: no window enforced
	window   time.Duration // Config.Window
	accepted []time.Time   // with strict: the accepted arrivals, in order
}

// Config is how StartConfig serves the API. The zero Config is Start's.
type Config struct {
	// TLS, when set, serves HTTPS with it (its Certificates): URL is
	// https://.
	TLS *tls.Config
	// HTTP2 offers HTTP/2 besides HTTP/1.1 (over TLS); false: HTTP/1.1
	// only.
	HTTP2 bool
	// IdleTimeout closes a connection that has carried no request for
	// that long; 0: never (http.Server's default without ReadTimeout).
	IdleTimeout time.Duration
	// Limit, when above 0, makes the API enforce a strict sliding window:
	// a request that arrives when Limit accepted requests lie in the
	// window of length Window ending at its arrival, (at-Window, at], is
	// answered 429 and not counted (Arrival.Refused).
	Limit  int
	Window time.Duration
}

// SetInFlight makes the API hold every call for a uniform random time in
// [holdMin, holdMax] and refuse, with 429 at once, a call arriving while n
// are held. Its figures are in the arrivals (End, OverCap). An n of 0
// turns that off: calls are answered at once, as by default.
func (s *Server) SetInFlight(n int, holdMin, holdMax time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit, s.holdMin, s.holdMax = n, holdMin, max(holdMin, holdMax)
}

// Start listens on a free loopback port and serves until Close.
func Start() (*Server, error) { return StartConfig(Config{}) }

// StartConfig is Start, served as cfg says.
func StartConfig(cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
	}
	s := &Server{URL: scheme + ln.Addr().String() + "/call", ln: ln, stop: make(chan struct{}),
		strict: max(cfg.Limit, 0), window: cfg.Window}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: cfg.IdleTimeout,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, &connInfo{at: time.Now()})
		}}
	if cfg.TLS != nil {
		s.srv.TLSConfig = cfg.TLS.Clone()
		s.srv.Protocols = new(http.Protocols)
		s.srv.Protocols.SetHTTP1(true)
		s.srv.Protocols.SetHTTP2(cfg.HTTP2)
		go func() { _ = s.srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { _ = s.srv.Serve(ln) }()
	}
	go s.watch()
	return s, nil
}

// watch sleeps a millisecond at a time until Close, and records each wake
// that came stallMin or more late.
func (s *Server) watch() {
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(time.Millisecond):
		}
		now := time.Now()
		if late := now.Sub(last) - time.Millisecond; late >= stallMin {
			s.mu.Lock()
			s.stalls = append(s.stalls, Stall{At: last, Len: late})
			s.mu.Unlock()
		}
		last = now
	}
}

// Addr is the address the API listens on: 127.0.0.1 and its port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Stalls returns the stalls recorded since the last call, and forgets
// them.
func (s *Server) Stalls() []Stall {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stalls
	s.stalls = nil
	return st
}

// ServeHTTP records the arrival and answers 200.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	replica, err := strconv.Atoi(r.Header.Get(ReplicaHeader))
	if err != nil {
		replica = -1
	}
	a := &Arrival{At: now, Replica: replica,
		Score:    header(r, ScoreHeader, time.UnixMicro),
		Started:  header(r, StartedHeader, nanos),
		Returned: header(r, ReturnedHeader, nanos),
		Sent:     header(r, SentHeader, nanos),
		Call:     r.Header.Get(CallHeader), Proto: r.Proto, Tenant: r.Header.Get(TenantHeader)}
	if ci, ok := r.Context().Value(connKey{}).(*connInfo); ok {
		if ci.requests.Add(1) == 1 {
			a.NewConn, a.ConnAt = true, ci.at
		}
	}
	s.mu.Lock()
	s.arrivals = append(s.arrivals, a)
	if s.strict > 0 && !s.admit(a) {
		s.mu.Unlock()
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	if s.limit == 0 {
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	}
	if s.inFlight >= s.limit {
		a.OverCap = true
		s.mu.Unlock()
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	s.inFlight++
	hold := s.holdMin + rand.N(s.holdMax-s.holdMin+1)
	s.mu.Unlock()
	time.Sleep(hold)
	// The call ends here, before a byte of the response: a client that
	// gives its place back on reading it does so after.
	s.mu.Lock()
	s.inFlight--
	a.End = time.Now()
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// admit decides a's fate under the strict window, with s.mu held: it
// takes a's arrival time anew under the lock, so that the arrivals the
// window counts come in order, and reports whether a is accepted (else it
// is marked Refused).
func (s *Server) admit(a *Arrival) bool {
	a.At = time.Now()
	if n := len(s.accepted); n >= s.strict && a.At.Sub(s.accepted[n-s.strict]) < s.window {
		a.Refused = true
		return false
	}
	s.accepted = append(s.accepted, a.At)
	return true
}

// header reads an integer time header with conv; zero when it is absent or
// not an integer.
func header(r *http.Request, name string, conv func(int64) time.Time) time.Time {
	v, err := strconv.ParseInt(r.Header.Get(name), 10, 64)
	if err != nil || v == 0 {
		return time.Time{}
	}
	return conv(v)
}

func nanos(ns int64) time.Time { return time.Unix(0, ns) }

// Take returns the arrivals recorded since the last Take, in arrival order,
// and forgets them.
func (s *Server) Take() []Arrival {
	s.mu.Lock()
	a := make([]Arrival, len(s.arrivals))
	for i, p := range s.arrivals {
		a[i] = *p
	}
	s.arrivals = nil
	s.accepted = nil
	s.mu.Unlock()
	slices.SortStableFunc(a, func(x, y Arrival) int { return x.At.Compare(y.At) })
	return a
}

// Close stops the server.
func (s *Server) Close() error {
	close(s.stop)
	return s.srv.Close()
}
