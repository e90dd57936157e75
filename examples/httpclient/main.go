// Command httpclient shows a throttled http.Client: a Throttler's RoundTripper
// makes every request wait for room in the shared quota, so a burst of calls
// to a rate-limited API is spread out instead of being answered 429.
//
// It makes 20 calls to a fake API that allows 5 calls per 500ms, through a
// client throttled to the same quota on an embedded miniredis, and prints the
// status and elapsed time of each: they come back 200 in groups of five,
// about half a second apart. The exit status is 1 if the API answered 429.
//
// Usage:
//
//	go run ./examples/httpclient
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/fakeapi"
)

const (
	calls    = 20
	limit    = 5
	interval = 500 * time.Millisecond
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httpclient:", err)
		os.Exit(1)
	}
}

func run() error {
	mr, err := miniredis.Run()
	if err != nil {
		return err
	}
	defer mr.Close()
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rc.Close()

	api := fakeapi.New(limit, interval)
	srv := httptest.NewServer(api)
	defer srv.Close()

	thr, err := throttler.New(rc, "examples:httpclient", limit, interval)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: thr.RoundTripper(nil), Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	fmt.Printf("%d calls to an API allowing %d per %v\n", calls, limit, interval)
	ctx := context.Background()
	start := time.Now()
	for i := 1; i <= calls; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/users", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Printf("call %2d: %s  after %4dms\n", i, resp.Status, time.Since(start).Milliseconds())
	}

	s := api.Stats()
	fmt.Printf("\n%d calls in %.2fs: %d accepted, %d answered 429; at most %d in any %v window (limit %d)\n",
		calls, time.Since(start).Seconds(), s.Accepted, s.Rejected, s.MaxInWindow, interval, limit)
	if s.Rejected > 0 || s.MaxInWindow > limit {
		return fmt.Errorf("the API saw more than %d calls per %v", limit, interval)
	}
	return nil
}
