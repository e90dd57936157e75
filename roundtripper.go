package throttler

import "net/http"

// RoundTripper returns an http.RoundTripper that waits for one call's worth of
// quota on t, using the request's context, before handing the request to next
// (http.DefaultTransport when next is nil, looked up at each request).
//
// It keeps net/http's contract: it does not modify or read the request, it
// returns next's response and error untouched (a 429 is a response, not an
// error), and when the wait fails it closes the request body and returns the
// wait's error, so that errors.Is(err, context.DeadlineExceeded) and the like
// hold through http.Client's *url.Error. It is safe for concurrent use.
func (t *Throttler) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return &roundTripper{t: t, next: next}
}

type roundTripper struct {
	t    *Throttler
	next http.RoundTripper
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := rt.t.Wait(req.Context()); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	next := rt.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(req)
}
