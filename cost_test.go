package throttler

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// totalTokens reads an OpenAI-style usage from the tail of a body: the last
// "total_tokens" it holds.
func totalTokens(_ *http.Response, tail []byte) (int, bool) {
	m := regexp.MustCompile(`"total_tokens":\s*(\d+)`).FindAllSubmatch(tail, -1)
	if len(m) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(m[len(m)-1][1]))
	return n, err == nil
}

// A Transport with a Cost reserves the estimate, and settles with the cost
// the response states once the caller has read it, a plain JSON body and a
// stream whose last event carries the usage alike; the caller reads the
// body as the API sent it.
func TestTransportSettlesCost(t *testing.T) {
	const filler = 100 << 10 // more than the tail kept: usage comes last
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used := r.URL.Query().Get("used")
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 50 {
				fmt.Fprintf(w, "data: {\"delta\":\"%s\"}\n\n", strings.Repeat("x", i*40))
				w.(http.Flusher).Flush()
			}
			fmt.Fprintf(w, "data: {\"usage\":{\"total_tokens\":%s}}\n\ndata: [DONE]\n\n", used)
			return
		}
		fmt.Fprintf(w, `{"text":"%s","usage":{"total_tokens":%s}}`, strings.Repeat("y", filler), used)
	}))
	defer api.Close()
	defer api.Client().CloseIdleConnections()

	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		th := mustNew(t, c, key, 1000, time.Hour, WithLogger(quiet))
		client := &http.Client{Transport: &Transport{Base: api.Client().Transport, Route: th.Route(),
			Cost: &Cost{Estimate: func(*http.Request) int { return 300 }, Actual: totalTokens}}}

		resp, err := client.Get(api.URL + "/complete?used=120")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(body) < filler || !strings.HasSuffix(string(body), `"total_tokens":120}}`) {
			t.Fatalf("the caller read %d bytes (err %v), not the body the API sent", len(body), err)
		}
		if n := len(keyMembers(t, c, key)); n != 120 {
			t.Fatalf("after a call estimated at 300 that used 120, the window holds %d units, want 120", n)
		}

		resp, err = client.Get(api.URL + "/stream?used=450")
		if err != nil {
			t.Fatal(err)
		}
		events := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				events++
			}
		}
		resp.Body.Close()
		if events != 52 {
			t.Fatalf("the caller read %d events, want 52", events)
		}
		if n := len(keyMembers(t, c, key)); n != 120+450 {
			t.Fatalf("after a stream estimated at 300 that used 450, the window holds %d units, want %d", n, 120+450)
		}
		if s := th.Stats(); s.Costs.Settled != 2 || s.Costs.Returned != 180 || s.Costs.Debt != 150 {
			t.Fatalf("Stats: %+v, want 2 settled, 180 returned, 150 debt", s)
		}

		// A body closed unread settles from what was read (nothing: the
		// estimate stands).
		resp, err = client.Get(api.URL + "/complete?used=10")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if n := len(keyMembers(t, c, key)); n != 570+300 {
			t.Fatalf("a body closed unread: the window holds %d units, want the estimate kept (%d)", n, 570+300)
		}
		waitIdle(t, th)
	})
}

// A Cost without Estimate, for a request whose context carries no cost
// (ContextWithCost), is an error reported for the request rather than a
// panic.
func TestTransportCostNeedsEstimate(t *testing.T) {
	th := miniThrottler(t, 5, time.Second)
	tr := &Transport{Route: th.Route(), Cost: &Cost{}}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://api.invalid/", nil)
	if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "Estimate") {
		t.Fatalf("RoundTrip with a Cost lacking Estimate: %v, want an error naming Estimate", err)
	}
}
