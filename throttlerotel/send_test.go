package throttlerotel

import (
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// connBase plays net/http's part in a send: its first request waits for
// its connection longer than a slot allows, as a dial does.
type connBase struct{ n int }

func (b *connBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.n++
	if b.n == 1 {
		time.Sleep(80 * time.Millisecond) // past half the default buffer (25ms)
	}
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil {
		trace.GotConn(httptrace.GotConnInfo{})
		trace.WroteHeaders()
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// Each send through a Transport records its connection's delay, with
// whether it took a new slot.
func TestSendDelayMetrics(t *testing.T) {
	s := newSink(t)
	rdb, _ := newRedis(t)
	th := instrumented(t, s, rdb, "api", 10, time.Second, nil)
	c := &http.Client{Transport: th.RoundTripper(&connBase{})}
	for range 3 {
		resp, err := c.Get("http://api.invalid/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	got := s.collect(t)
	if n, sum := got.count(t, "throttler.send.delay", SendReslottedAttribute.Bool(true), SendLateAttribute.Bool(false)); n != 1 || sum < 0.07 {
		t.Errorf("reslotted sends: %d, delays summing to %gs; want 1 of about 80ms", n, sum)
	}
	if n, _ := got.count(t, "throttler.send.delay", SendReslottedAttribute.Bool(false), SendLateAttribute.Bool(false)); n != 2 {
		t.Errorf("sends on time: %d, want 2", n)
	}
	if v, n := got.sum(t, "throttler.redis.round_trips.resent"); n != 1 || v != 0 {
		t.Errorf("throttler.redis.round_trips.resent = %v in %d points, want 0 in 1", v, n)
	}
	if st := th.Stats(); st.Sends.Reslotted != 1 {
		t.Errorf("Stats.Sends.Reslotted %d, want 1", st.Sends.Reslotted)
	}
}
