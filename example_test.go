package throttler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler"
	"github.com/redis/go-redis/v9"
)

// embeddedRedis stands in for the Redis every replica shares.
func embeddedRedis() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { rdb.Close(); mr.Close() }
}

// Every replica runs the same code against the same Redis and key; together
// they never exceed 3 calls in any 200ms window. Calls over the limit are
// delayed, not dropped.
func ExampleThrottler_Wait() {
	rdb, stop := embeddedRedis()
	defer stop()

	t, err := throttler.New(rdb, "github-api", 3, 200*time.Millisecond)
	if err != nil {
		panic(err)
	}
	var went []time.Time
	for range 6 {
		if err := t.Wait(context.Background()); err != nil {
			panic(err)
		}
		went = append(went, time.Now()) // make the call here
	}
	fmt.Println("6 calls made")
	fmt.Println("the 4th came at least 200ms after the 1st:", went[3].Sub(went[0]) >= 200*time.Millisecond)
	fmt.Println("the 6th came at least 200ms after the 3rd:", went[5].Sub(went[2]) >= 200*time.Millisecond)
	// Output:
	// 6 calls made
	// the 4th came at least 200ms after the 1st: true
	// the 6th came at least 200ms after the 3rd: true
}

// An LLM API meters tokens, and a call's cost is known only from its
// response: reserve an estimate, then settle the actual cost. A surplus is
// given back at once; an excess counts as debt that later calls wait out.
func ExampleThrottler_Acquire() {
	rdb, stop := embeddedRedis()
	defer stop()

	tokens, err := throttler.New(rdb, "llm-tokens", 10000, time.Minute)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	p, err := tokens.Acquire(ctx, 1200) // prompt + max_tokens
	if err != nil {
		panic(err)
	}
	used := 700 // from the response's usage
	if err := p.Settle(ctx, used); err != nil {
		panic(err)
	}
	u, _ := tokens.Usage(ctx)
	fmt.Println("tokens counted in the last minute:", u[0].Used+u[0].Reserved)
	// Output:
	// tokens counted in the last minute: 700
}

// A wait that cannot end before the context's deadline fails at once, with
// an error that is context.DeadlineExceeded to errors.Is.
func ExampleThrottler_Wait_deadline() {
	rdb, stop := embeddedRedis()
	defer stop()

	t, _ := throttler.New(rdb, "reports", 1, time.Hour)
	_ = t.Wait(context.Background()) // the hour's only call

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err := t.Wait(ctx)
	fmt.Println(errors.Is(err, context.DeadlineExceeded), time.Since(start) < time.Second)
	// Output: true true
}

// Allow never waits: it says whether the call may go now.
func ExampleThrottler_Allow() {
	rdb, stop := embeddedRedis()
	defer stop()

	t, _ := throttler.New(rdb, "search", 2, time.Hour)
	for range 3 {
		res, err := t.Allow(context.Background())
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry-in-an-hour=%v\n",
			res.Allowed, res.Remaining, res.RetryAfter > 59*time.Minute)
	}
	// Output:
	// allowed=true remaining=1 retry-in-an-hour=false
	// allowed=true remaining=0 retry-in-an-hour=false
	// allowed=false remaining=0 retry-in-an-hour=true
}

// Do waits for the quota, then makes the call.
func ExampleThrottler_Do() {
	rdb, stop := embeddedRedis()
	defer stop()

	t, _ := throttler.New(rdb, "mailer", 10, time.Second)
	err := t.Do(context.Background(), func(ctx context.Context) error {
		fmt.Println("sending")
		return nil
	})
	fmt.Println(err)
	// Output:
	// sending
	// <nil>
}

// Wrap turns any context-taking function into a throttled one of the same
// type.
func ExampleWrap() {
	rdb, stop := embeddedRedis()
	defer stop()

	t, _ := throttler.New(rdb, "users-api", 10, time.Second)
	lookup := throttler.Wrap(t, func(ctx context.Context, id int) (string, error) {
		return fmt.Sprintf("user-%d", id), nil
	})
	name, err := lookup(context.Background(), 42)
	fmt.Println(name, err)
	// Output: user-42 <nil>
}

// An http.Client whose every request waits for the shared quota. Responses,
// 429s included, come back untouched.
func ExampleThrottler_RoundTripper() {
	rdb, stop := embeddedRedis()
	defer stop()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer api.Close()

	t, _ := throttler.New(rdb, "partner-api", 2, 100*time.Millisecond)
	client := &http.Client{Transport: t.RoundTripper(nil)}
	for range 3 {
		resp, err := client.Get(api.URL)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}
	client.CloseIdleConnections()
	// Output:
	// 200 ok
	// 200 ok
	// 200 ok
}

// With FallbackLocal, a replica keeps throttling on its own while Redis is
// down, at its share of the limit: here half of 4 calls per hour.
func ExampleFallbackLocal() {
	rdb, stop := embeddedRedis()
	stop() // Redis is gone

	t, _ := throttler.New(rdb, "payments", 4, time.Hour,
		throttler.WithFailurePolicy(throttler.FallbackLocal(0.5)),
		throttler.WithLogger(slogDiscard()))
	for range 3 {
		res, err := t.Allow(context.Background())
		fmt.Println(res.Allowed, err)
	}
	// Output:
	// true <nil>
	// true <nil>
	// false <nil>
}

func slogDiscard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
