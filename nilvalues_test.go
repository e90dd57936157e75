package throttler

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// TestNilAndZeroValues: a nil or zero Throttler, a nil Context, a nil or
// zero Permit and a Transport without a Route fail with an error wrapping
// ErrInvalidArgument, or do nothing, as their docs say; none panics.
func TestNilAndZeroValues(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	made := mustNew(t, miniDialer(t, mr)(), "quota", 10, time.Second)
	var nilCtx context.Context // a nil Context, as a caller might pass one

	type call struct {
		name string
		do   func(th *Throttler, ctx context.Context) error
	}
	calls := []call{
		{"Wait", func(th *Throttler, ctx context.Context) error { return th.Wait(ctx) }},
		{"WaitN", func(th *Throttler, ctx context.Context) error { return th.WaitN(ctx, 1) }},
		{"Allow", func(th *Throttler, ctx context.Context) error { _, err := th.Allow(ctx); return err }},
		{"AllowN", func(th *Throttler, ctx context.Context) error { _, err := th.AllowN(ctx, 1); return err }},
		{"Acquire", func(th *Throttler, ctx context.Context) error { _, err := th.Acquire(ctx, 1); return err }},
		{"Do", func(th *Throttler, ctx context.Context) error {
			return th.Do(ctx, func(context.Context) error { return errors.New("fn ran") })
		}},
		{"DoCost", func(th *Throttler, ctx context.Context) error {
			return th.DoCost(ctx, 1, func(context.Context) (int, error) { return 1, errors.New("fn ran") })
		}},
		{"LowerLimit", func(th *Throttler, ctx context.Context) error { return th.LowerLimit(ctx, 1, time.Second) }},
		{"PauseUntil", func(th *Throttler, ctx context.Context) error { return th.PauseUntil(ctx, time.Now().Add(time.Second)) }},
		{"BackOff", func(th *Throttler, ctx context.Context) error { return th.BackOff(ctx, time.Second, 0) }},
		{"Usage", func(th *Throttler, ctx context.Context) error { _, err := th.Usage(ctx); return err }},
		{"InFlight", func(th *Throttler, ctx context.Context) error { _, _, err := th.InFlight(ctx); return err }},
	}
	for _, tc := range []struct {
		name string
		th   *Throttler
		ctx  context.Context
	}{
		{"nil Throttler", nil, ctx},
		{"zero Throttler", &Throttler{}, ctx},
		{"nil Context", made, nilCtx},
	} {
		for _, c := range calls {
			err := c.do(tc.th, tc.ctx)
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s: %s returned %v, want an error wrapping ErrInvalidArgument", tc.name, c.name, err)
			}
		}
	}

	for _, th := range []*Throttler{nil, {}} {
		if th.Limit() != 0 || th.Interval() != 0 || th.Key() != "" {
			t.Errorf("%v: Limit, Interval, Key = %d, %s, %q; want zeros", th, th.Limit(), th.Interval(), th.Key())
		}
		if s := th.Stats(); !reflect.DeepEqual(s, Stats{}) {
			t.Errorf("%v: Stats() = %+v, want zero", th, s)
		}
		th.AddObserver(Observer{}) // does nothing
		if th.Route() != nil {
			t.Errorf("%v: Route() is not nil", th)
		}
	}

	for _, p := range []*Permit{nil, {}} {
		p.Done() // does nothing, so that `defer p.Done()` may precede the error check
		if err := p.Settle(ctx, 1); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Settle on %v: %v, want an error wrapping ErrInvalidArgument", p, err)
		}
		if p.Estimate() != 0 || !p.At().IsZero() {
			t.Errorf("%v: Estimate, At = %d, %s; want zeros", p, p.Estimate(), p.At())
		}
	}

	// A Transport without a Route, and a nil one, fail the request and
	// close its body, rather than send it unthrottled.
	for _, tr := range []*Transport{nil, {}, {Base: http.DefaultTransport}} {
		body := &closeRecorder{Reader: strings.NewReader("payload")}
		req, err := http.NewRequest(http.MethodPost, "http://api.invalid/", body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if resp != nil || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("RoundTrip on %v: %v, %v; want an error wrapping ErrInvalidArgument", tr, resp, err)
		}
		if !body.closed {
			t.Errorf("RoundTrip on %v left the request's body open", tr)
		}
	}
	var nilTh *Throttler
	if tr := nilTh.RoundTripper(nil).(*Transport); tr.Route != nil {
		t.Error("a nil Throttler's RoundTripper has a Route")
	}
}

// closeRecorder is a request body that records its Close.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }
