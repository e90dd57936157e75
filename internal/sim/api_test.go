package sim

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"testing"
	"testing/synctest"
	"time"
)

// get sends a request through b with ctx, closes the answer's body, and
// returns the call's record.
func get(t *testing.T, b http.RoundTripper, ctx context.Context) (*HTTPCall, error) {
	t.Helper()
	call := &HTTPCall{}
	req, err := http.NewRequestWithContext(WithHTTPCall(ctx, call), http.MethodGet, "http://api.sim/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.RoundTrip(req)
	if err == nil {
		if resp.StatusCode != http.StatusOK {
			t.Errorf("status %d, want 200", resp.StatusCode)
		}
		resp.Body.Close()
	}
	return call, err
}

// Without a fault a request is written at once, reaches the API one way
// later and is answered a round trip after it was sent.
func TestAPIWithoutFault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := NewRecorder()
		api := NewAPI(rec, 1, 5*time.Millisecond, 1)
		b := api.Base(0, 0, func() bool { return true })
		call, err := get(t, b, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if wrote := call.Wrote(); len(wrote) != 1 || wrote[0] != 0 {
			t.Errorf("written at %v, want once at 0", wrote)
		}
		if got := rec.Since(); got != 10*time.Millisecond {
			t.Errorf("answered after %s, want a round trip of 10ms", got)
		}
	})
}

// During a fault the pool keeps at most keep idle connections: requests
// beyond them set up a new one, between Base and GotConn, and the write
// follows GotConn at once.
func TestAPIConnSetup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := NewRecorder()
		api := NewAPI(rec, 1, time.Millisecond, 1) // a connection is busy for its round trip
		b := api.Base(0, 0, func() bool { return true })
		api.ConnSetup(0, time.Hour, 100*time.Millisecond, 1)

		var got time.Duration
		trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { got = rec.Since() }}
		ctx := httptrace.WithClientTrace(context.Background(), trace)
		first, err := get(t, b, ctx) // the pool was emptied: cold
		if err != nil {
			t.Fatal(err)
		}
		w := first.Wrote()
		if len(w) != 1 || w[0] != got {
			t.Fatalf("written at %v, GotConn at %s: want one write right after GotConn", w, got)
		}
		start := rec.Since()
		second, _ := get(t, b, ctx) // its connection went back to the pool: warm
		if w := second.Wrote(); len(w) != 1 || w[0] != start {
			t.Errorf("on an idle connection: written at %v, want at once (%s)", w, start)
		}
		// Two at once: one finds the idle connection, the other sets one
		// up (the seed's draw gives it some time).
		done := make(chan time.Duration, 2)
		start = rec.Since()
		for range 2 {
			go func() {
				c, _ := get(t, b, context.Background())
				done <- c.Wrote()[0] - start
			}()
		}
		a, c := <-done, <-done
		if min(a, c) != 0 || max(a, c) == 0 || max(a, c) > 100*time.Millisecond {
			t.Errorf("two requests on a pool of one: written %s and %s after they were handed over, want one at once, one within 100ms", a, c)
		}
	})
}

// A connection closed in GotConn keeps the request from the API; a
// context that ends while the connection is set up ends the request
// before GotConn.
func TestAPINotWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := NewRecorder()
		api := NewAPI(rec, 1, 0, 1)
		b := api.Base(0, 0, func() bool { return true })
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { i.Conn.Close() }}
		call, err := get(t, b, httptrace.WithClientTrace(context.Background(), trace))
		if !errors.Is(err, errConnClosed) || len(call.Wrote()) != 0 {
			t.Errorf("connection closed in GotConn: err %v, writes %v; want errConnClosed and none", err, call.Wrote())
		}

		api.ConnSetup(0, time.Hour, time.Second, 0)
		gotConn := false
		trace = &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { gotConn = true }}
		ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(context.Background(), trace), time.Nanosecond)
		defer cancel()
		call, err = get(t, b, ctx)
		if !errors.Is(err, context.DeadlineExceeded) || gotConn || len(call.Wrote()) != 0 {
			t.Errorf("deadline during the setup: err %v, GotConn %v, writes %v; want the deadline, no GotConn, no write", err, gotConn, call.Wrote())
		}
	})
}
