package throttler_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/redis/go-redis/v9"
)

// Two replicas call one API through throttled clients. When the API answers
// 429 with Retry-After to one of them, both pause: the other's next request
// waits until the pause is over instead of earning its own 429.
func ExampleTransport() {
	rdb, stop := embeddedRedis()
	defer stop()

	var requests atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			w.Header().Set("Retry-After", "1") // seconds; an HTTP date works too
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer api.Close()

	defer api.Client().CloseIdleConnections()

	replica := func() *http.Client {
		// Each replica has its own Redis client and Throttler on the shared key.
		client := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
		t, err := throttler.New(client, "partner-api", 100, time.Second)
		if err != nil {
			panic(err)
		}
		return &http.Client{Transport: &throttler.Transport{Base: api.Client().Transport, Route: t.Route()}}
	}
	a, b := replica(), replica()

	// b waits out the pause a's 429 starts, which ends a second after a's
	// answer: more than 900ms after a sends its request, however loaded
	// the machine (less 100ms for what the clock's estimate may be off).
	start := time.Now()
	resp, err := a.Get(api.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("replica a:", resp.StatusCode)
	resp, err = b.Get(api.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("replica b:", resp.StatusCode, "after waiting out the pause:", time.Since(start) > 900*time.Millisecond)
	// Output:
	// replica a: 429
	// replica b: 200 after waiting out the pause: true
}

// Retries resend a request the API answered 429 or 503 with Retry-After,
// once the shared pause is over, when its body can be replayed (no body, or
// GetBody set, as http.NewRequest does for bytes and strings readers).
func ExampleTransport_retries() {
	rdb, stop := embeddedRedis()
	defer stop()
	t, err := throttler.New(rdb, "partner-api", 100, time.Second)
	if err != nil {
		panic(err)
	}
	var requests atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "created")
	}))
	defer api.Close()

	defer api.Client().CloseIdleConnections()

	client := &http.Client{Transport: &throttler.Transport{Base: api.Client().Transport, Route: t.Route(), Retries: 3}}
	resp, err := client.Post(api.URL, "application/json", strings.NewReader(`{"name":"x"}`))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", requests.Load(), "sends")
	// Output: 200 after 2 sends
}

// One http.Client calls two APIs, each with its own quota; requests to any
// other host go unthrottled.
func ExampleByHost() {
	rdb, stop := embeddedRedis()
	defer stop()
	github, err := throttler.New(rdb, "github", 5000, time.Hour)
	if err != nil {
		panic(err)
	}
	openai, err := throttler.New(rdb, "openai", 500, time.Minute)
	if err != nil {
		panic(err)
	}
	route := throttler.ByHost(map[string]*throttler.Throttler{
		"api.github.com": github,
		"api.openai.com": openai,
	})
	client := &http.Client{Transport: &throttler.Transport{Route: route}}
	_ = client // client.Get("https://api.github.com/...") waits on github's quota

	req, _ := http.NewRequest(http.MethodGet, "https://api.openai.com/v1/models", nil)
	fmt.Println(route(req).Key())
	// Output: openai
}

// An API with two limits at once: 2 calls per 200ms and 3 per hour. A call
// is admitted only when both have room; the keys share a {tag}, so they
// live in one Redis Cluster slot.
func ExampleWithLimit() {
	rdb, stop := embeddedRedis()
	defer stop()
	t, err := throttler.New(rdb, "{partner}:burst", 2, 200*time.Millisecond,
		throttler.WithLimit("{partner}:hour", 3, time.Hour))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	start := time.Now()
	for range 3 {
		if err := t.Wait(ctx); err != nil { // the 3rd waits for the burst window
			panic(err)
		}
	}
	fmt.Println("3 calls, the last delayed by the burst limit:", time.Since(start) >= 200*time.Millisecond)
	res, err := t.Allow(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("a 4th this hour:", res.Allowed, "- retry in about an hour:", res.RetryAfter > 59*time.Minute)
	// Output:
	// 3 calls, the last delayed by the burst limit: true
	// a 4th this hour: false - retry in about an hour: true
}

// 5000 calls an hour, spread out: without pacing, a sliding window lets all
// 5000 go at once and then none for the rest of the hour; WithPacing(10)
// lets at most 10 go in any 7.2s (about 1.4 a second), in bursts of up to
// 10 after a pause.
func ExampleWithPacing() {
	rdb, stop := embeddedRedis()
	defer stop()
	t, err := throttler.New(rdb, "github", 5000, time.Hour, throttler.WithPacing(10))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	allowed := 0
	for range 20 {
		res, err := t.Allow(ctx)
		if err != nil {
			panic(err)
		}
		if res.Allowed {
			allowed++
		}
	}
	fmt.Println("allowed at once:", allowed)
	// Output:
	// allowed at once: 10
}

// The API lowered the quota: every replica follows at once, and calls
// already made still count.
func ExampleThrottler_LowerLimit() {
	rdb, stop := embeddedRedis()
	defer stop()
	t, err := throttler.New(rdb, "partner-api", 10, time.Minute)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := t.LowerLimit(ctx, 2, time.Hour); err != nil {
		panic(err)
	}
	for range 3 {
		res, err := t.Allow(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Println("allowed:", res.Allowed, "limit in force:", t.Stats().LimitNow)
	}
	// Output:
	// allowed: true limit in force: 2
	// allowed: true limit in force: 2
	// allowed: false limit in force: 2
}

// Stats is a snapshot of counters for metrics; an Observer sees events as
// they happen (examples/prometheus exports both).
func ExampleThrottler_Stats() {
	rdb, stop := embeddedRedis()
	defer stop()
	var waits atomic.Int32
	t, err := throttler.New(rdb, "partner-api", 2, time.Minute, throttler.WithObserver(throttler.Observer{
		Admitted: func(n int, waited time.Duration) { waits.Add(1) },
	}))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	t.Wait(ctx)
	t.Allow(ctx)
	t.Allow(ctx) // refused: the window is full
	s := t.Stats()
	fmt.Println("admitted:", s.Admitted, "refused:", s.Denied, "observed:", waits.Load())
	// Output: admitted: 2 refused: 1 observed: 2
}

// Usage reads the shared window as every replica sees it (the throttler
// command prints it).
func ExampleThrottler_Usage() {
	rdb, stop := embeddedRedis()
	defer stop()
	t, err := throttler.New(rdb, "partner-api", 5, time.Minute)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := t.WaitN(ctx, 5); err != nil {
		panic(err)
	}
	if err := t.PauseUntil(ctx, time.Now().Add(30*time.Second)); err != nil {
		panic(err)
	}
	us, err := t.Usage(ctx)
	if err != nil {
		panic(err)
	}
	u := us[0]
	fmt.Printf("%s: %d of %d\n", u.Key, u.Used+u.Reserved, u.Limit)
	fmt.Println("paused:", !u.PausedUntil.IsZero())
	fmt.Println("next slot in about a minute:", time.Until(u.NextFree) > 55*time.Second)
	// Output:
	// partner-api: 5 of 5
	// paused: true
	// next slot in about a minute: true
}

// An API that allows 2 requests in flight at once, across every replica:
// WithInFlight caps them besides the rate. Each call holds its place while
// fn runs; the others wait for a place, without polling Redis.
func ExampleWithInFlight() {
	rdb, stop := embeddedRedis()
	defer stop()

	t, err := throttler.New(rdb, "{search}:rate", 100, time.Second,
		throttler.WithInFlight("{search}:inflight", 2, 0))
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	running, most := 0, 0
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := t.Do(context.Background(), func(context.Context) error {
				mu.Lock()
				running++
				most = max(most, running)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond) // the call
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
			if err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("most calls in flight at once:", most)
	// Output:
	// most calls in flight at once: 2
}
