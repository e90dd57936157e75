package throttler_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/fakeapi"
	"github.com/redis/go-redis/v9"
)

// An API that meters each credential apart (a partner API per customer
// token, an LLM API per customer key, a store's access token): a Group
// gives each credential its own quota, shared by every replica whose Group
// has the same prefix, made on first use and dropped once idle. Keyed by
// a digest of the Authorization header (ByHeader), no token is kept,
// logged or sent to Redis; the limits function sees the digest. A
// credential whose limits differ by plan is keyed by something the app
// can look its plan up by (an installation, a store, a customer ID: see
// ExampleGroup_githubApp), and a vendor's Counters and Cost apply per
// credential as they would to one Throttler (see
// ExampleGroup_shopifyGraphQL).
//
// Here three replicas with two goroutines per token each make 5 calls
// with each of three customers' tokens against a stand-in that allows each
// token 10 calls in any 500ms, strictly, and refuses the 11th with a 429
// and Retry-After, which pauses the token's quota for every replica; the
// refused call is sent again once the pause is over (Retries). The window
// a Group keeps for each key across replicas is what
// TestGroupReplicasShareQuota asserts.
func ExampleGroup_perToken() {
	rdb, stop := embeddedRedis()
	defer stop()
	const limit, interval = 10, 500 * time.Millisecond
	var mu sync.Mutex
	apis := map[string]*fakeapi.API{} // the stand-in's window per token
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		a, ok := apis[r.Header.Get("Authorization")]
		if !ok {
			a = fakeapi.New(limit, interval)
			apis[r.Header.Get("Authorization")] = a
		}
		mu.Unlock()
		a.ServeHTTP(w, r)
	}))
	defer api.Close()
	defer api.Client().CloseIdleConnections()

	replica := func() *http.Client {
		rc := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr}) // each replica its own
		g, err := throttler.NewGroup(rc, "partner-api:", func(digest string) (throttler.KeyQuota, error) {
			return throttler.KeyQuota{Limit: limit, Interval: interval}, nil // every token's plan, here
		})
		if err != nil {
			panic(err)
		}
		return &http.Client{Transport: &throttler.Transport{
			Base:    api.Client().Transport,
			Route:   g.Route(throttler.ByHeader("Authorization")), // requests without it go unthrottled
			Retries: 1,                                            // a refused call goes again after the pause
		}}
	}

	tokens := []string{"Bearer token-A", "Bearer token-B", "Bearer token-C"}
	var wg sync.WaitGroup
	for range 3 {
		client := replica()
		for _, token := range tokens {
			for range 2 {
				wg.Go(func() {
					for range 5 {
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
						req.Header.Set("Authorization", token)
						if resp, err := client.Do(req); err == nil {
							resp.Body.Close()
						}
						cancel()
					}
				})
			}
		}
	}
	wg.Wait()
	for _, token := range tokens {
		fmt.Printf("%s: %d calls answered\n", token[len("Bearer "):], apis[token].Stats().Accepted)
	}
	// Output:
	// token-A: 30 calls answered
	// token-B: 30 calls answered
	// token-C: 30 calls answered
}
