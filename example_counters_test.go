package throttler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/counters"
	"github.com/redis/go-redis/v9"
)

// Two replicas share a GitHub-style quota of 10 calls a window with a
// consumer outside the throttler, which has already spent 6. The first
// response says 3 are left: every replica now holds back so that no more
// than 3 further calls go before the API's reset, and the call after them
// fails at once instead of earning a 403.
func ExampleTransport_counters() {
	rdb, stop := embeddedRedis()
	defer stop()

	var spent atomic.Int32
	spent.Store(6) // by the other consumer
	reset := time.Now().Add(time.Hour).Unix()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(spent.Add(1))
		w.Header().Set("X-RateLimit-Limit", "10")
		w.Header().Set("X-RateLimit-Remaining", strconv.Itoa(max(0, 10-n)))
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10)) // UTC epoch seconds
		w.Header().Set("X-RateLimit-Resource", "core")
		if n > 10 {
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	defer api.Close()
	defer api.Client().CloseIdleConnections()

	replica := func() (*throttler.Throttler, *http.Client) {
		client := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
		t, err := throttler.New(client, "github:token-1", 10, time.Hour) // the API's window
		if err != nil {
			panic(err)
		}
		return t, &http.Client{Transport: &throttler.Transport{
			Base:     api.Client().Transport,
			Route:    t.Route(),
			Counters: counters.GitHub(), // x-ratelimit-remaining, -reset, -resource; secondary limits
		}}
	}
	ta, a := replica()
	_, b := replica()

	get := func(c *http.Client) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	status, _ := get(a)
	fmt.Println("a:", status, "- the limit every replica follows until the reset:", ta.Stats().LimitNow)
	for range 3 {
		status, _ := get(b)
		fmt.Println("b:", status)
	}
	_, err := get(b)
	fmt.Println("b's next call fails at once:", errors.Is(err, context.DeadlineExceeded))
	fmt.Println("the API saw", spent.Load()-6, "calls of ours")
	// Output:
	// a: 200 - the limit every replica follows until the reset: 4
	// b: 200
	// b: 200
	// b: 200
	// b's next call fails at once: true
	// the API saw 4 calls of ours
}
