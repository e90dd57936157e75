package harness

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/bench/internal/fakeapi"
	"github.com/go-throttler/throttler/bench/internal/impls"
	"github.com/redis/go-redis/v9"
)

// This file is a KindFar replica's side: its client, as a user would
// build it, and what it records of each call.

// CallTrace is what a KindFar replica saw of one call, each time in Unix
// nanoseconds on the machine's one clock (0: it did not happen).
type CallTrace struct {
	// Call is the call's name (its CallHeader), which the API recorded
	// with its arrival.
	Call string `json:"call"`
	// Started is when client.Do was called: the wait began.
	Started int64 `json:"started"`
	// Waited is when the library's wait for the call returned
	// (Observer.Waited's End: the Transport hands the request on to its
	// base right after), the last one when several were reported (Waits);
	// Admitted, that the last one admitted the call.
	Waited   int64 `json:"waited"`
	Waits    int   `json:"waits"`
	Admitted bool  `json:"admitted"`
	// The request's httptrace: when the base Transport began to get a
	// connection for it (the first GetConn), got one (the last GotConn:
	// Reused, WasIdle), began and ended a dial and a TLS handshake (for
	// itself, or one it ended up not using), wrote its headers and its
	// request, and read the first byte of the response.
	GetConn      int64 `json:"get_conn"`
	GotConn      int64 `json:"got_conn"`
	Reused       bool  `json:"reused"`
	WasIdle      bool  `json:"was_idle"`
	ConnectStart int64 `json:"connect_start,omitempty"`
	ConnectDone  int64 `json:"connect_done,omitempty"`
	TLSStart     int64 `json:"tls_start,omitempty"`
	TLSDone      int64 `json:"tls_done,omitempty"`
	WroteHeaders int64 `json:"wrote_headers"`
	WroteRequest int64 `json:"wrote_request"`
	FirstByte    int64 `json:"first_byte"`
	// Done is when the body was read and closed (or client.Do failed).
	Done   int64  `json:"done"`
	Status int    `json:"status,omitempty"`
	Proto  string `json:"proto,omitempty"`
	Err    string `json:"err,omitempty"`
}

// traceRec records one call's times as they come, from whatever goroutine
// net/http or the library reports them on.
type traceRec struct {
	waited, waits, admitted                      atomic.Int64
	getConn, gotConn, reused, wasIdle            atomic.Int64
	connectStart, connectDone, tlsStart, tlsDone atomic.Int64
	wroteHeaders, wroteRequest, firstByte        atomic.Int64
}

type traceKey struct{}

func nowNs() int64 { return time.Now().UnixNano() }

func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// trace is the httptrace that fills r.
func (r *traceRec) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GetConn: func(string) { r.getConn.CompareAndSwap(0, nowNs()) },
		GotConn: func(info httptrace.GotConnInfo) {
			r.gotConn.Store(nowNs())
			r.reused.Store(flag(info.Reused))
			r.wasIdle.Store(flag(info.WasIdle))
		},
		ConnectStart:         func(string, string) { r.connectStart.CompareAndSwap(0, nowNs()) },
		ConnectDone:          func(string, string, error) { r.connectDone.Store(nowNs()) },
		TLSHandshakeStart:    func() { r.tlsStart.CompareAndSwap(0, nowNs()) },
		TLSHandshakeDone:     func(tls.ConnectionState, error) { r.tlsDone.Store(nowNs()) },
		WroteHeaders:         func() { r.wroteHeaders.Store(nowNs()) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { r.wroteRequest.Store(nowNs()) },
		GotFirstResponseByte: func() { r.firstByte.Store(nowNs()) },
	}
}

// observe notes a wait the library reported for the call.
func (r *traceRec) observe(w throttler.WaitInfo) {
	r.waited.Store(w.End.UnixNano())
	r.admitted.Store(flag(w.Err == nil))
	r.waits.Add(1)
}

// snapshot is what r recorded, as a CallTrace.
func (r *traceRec) snapshot() CallTrace {
	return CallTrace{
		Waited: r.waited.Load(), Waits: int(r.waits.Load()), Admitted: r.admitted.Load() == 1,
		GetConn: r.getConn.Load(), GotConn: r.gotConn.Load(), Reused: r.reused.Load() == 1, WasIdle: r.wasIdle.Load() == 1,
		ConnectStart: r.connectStart.Load(), ConnectDone: r.connectDone.Load(), TLSStart: r.tlsStart.Load(), TLSDone: r.tlsDone.Load(),
		WroteHeaders: r.wroteHeaders.Load(), WroteRequest: r.wroteRequest.Load(), FirstByte: r.firstByte.Load(),
	}
}

// farClient is a KindFar replica's client as a user would build it:
// &http.Client{Transport: thr.RoundTripper(base)}, base a clone of
// http.DefaultTransport with the API's CA as its only root and nothing
// else changed (MaxIdleConnsPerHost stays Go's default, 2; HTTP/2 is
// attempted, and used when the API offers it), thr this process's one
// Throttler on the scenario's key. An Observer notes each wait on the
// request's traceRec.
func farClient(cfg ReplicaConfig, rdb *redis.Client) (*http.Client, *throttler.Throttler, error) {
	roots, err := rootsFromPEM(cfg.CAPEM)
	if err != nil {
		return nil, nil, err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = &tls.Config{RootCAs: roots}
	w, err := impls.New(cfg.Impl, rdb, impls.Config{Key: cfg.Key, Limit: cfg.Limit, Interval: cfg.Interval, Buffer: cfg.Buffer, Procs: cfg.Procs})
	if err != nil {
		return nil, nil, err
	}
	th, ok := w.(*throttler.Throttler)
	if !ok {
		return nil, nil, fmt.Errorf("%s has no RoundTripper: the far scenarios run this library only", cfg.Impl)
	}
	th.AddObserver(throttler.Observer{Waited: func(ctx context.Context, wi throttler.WaitInfo) {
		if r, ok := ctx.Value(traceKey{}).(*traceRec); ok {
			r.observe(wi)
		}
	}})
	return &http.Client{Transport: th.RoundTripper(base)}, th, nil
}

// loopFar is one goroutine (g) of a KindFar replica: GET the API through
// client, read and close the body, until the run's context ends. The
// request carries the run's context: a call still waiting at the end is
// abandoned, and one on its way may be cut short (an admitted call's
// trace is kept either way).
func loopFar(ctx context.Context, cfg ReplicaConfig, client *http.Client, g int, warmEnd time.Time, l *goroutineLog) {
	for n := 0; ctx.Err() == nil; n++ {
		rec := &traceRec{}
		rctx := httptrace.WithClientTrace(context.WithValue(ctx, traceKey{}, rec), rec.trace())
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, cfg.APIURL, nil)
		if err != nil {
			l.errors++
			l.firstErr = firstOf(l.firstErr, err)
			return
		}
		id := fmt.Sprintf("%d-%d-%d", cfg.Index, g, n)
		req.Header.Set(fakeapi.ReplicaHeader, strconv.Itoa(cfg.Index))
		req.Header.Set(fakeapi.CallHeader, id)
		started := nowNs()
		resp, err := client.Do(req)
		status, proto := 0, ""
		if err == nil {
			status, proto = resp.StatusCode, resp.Proto
			_, err = io.Copy(io.Discard, resp.Body)
			err = errors.Join(err, resp.Body.Close())
		}
		t := rec.snapshot()
		t.Call, t.Started, t.Done, t.Status, t.Proto = id, started, nowNs(), status, proto
		if err != nil {
			t.Err = err.Error()
		}
		if !t.Admitted {
			if l.waitFailed(ctx, err) {
				return
			}
			continue
		}
		l.admit(time.Unix(0, started), time.Unix(0, t.Waited), warmEnd)
		l.calls = append(l.calls, t)
		switch {
		case ctx.Err() != nil:
			// The run ended: a call cut short is no error.
		case err != nil:
			l.called(err)
		case status == http.StatusTooManyRequests:
			l.api429++
		case status != http.StatusOK:
			l.called(errors.New("api: " + resp.Status))
		}
	}
}
