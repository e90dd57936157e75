// Package fakeapi is the third-party API the replicas call: an HTTP server on
// loopback that answers 200 to everything and records when each call arrived
// (time.Now() on arrival, in the harness process) and which replica sent it.
// It enforces nothing; the harness works out afterwards what a strict
// sliding-window API would have rejected.
package fakeapi

import (
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// ReplicaHeader carries the replica's index (0, 1, ...).
const ReplicaHeader = "X-Bench-Replica"

// Arrival is one recorded call.
type Arrival struct {
	At      time.Time
	Replica int
}

// Server is the fake API.
type Server struct {
	URL string
	srv *http.Server
	ln  net.Listener

	mu       sync.Mutex
	arrivals []Arrival
}

// Start listens on a free loopback port and serves until Close.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String() + "/call", ln: ln}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// ServeHTTP records the arrival and answers 200.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	replica, err := strconv.Atoi(r.Header.Get(ReplicaHeader))
	if err != nil {
		replica = -1
	}
	s.mu.Lock()
	s.arrivals = append(s.arrivals, Arrival{At: now, Replica: replica})
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// Take returns the arrivals recorded since the last Take, in arrival order,
// and forgets them.
func (s *Server) Take() []Arrival {
	s.mu.Lock()
	a := s.arrivals
	s.arrivals = nil
	s.mu.Unlock()
	slices.SortStableFunc(a, func(x, y Arrival) int { return x.At.Compare(y.At) })
	return a
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }
