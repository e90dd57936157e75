package throttler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/counters"
	"github.com/go-throttler/throttler/internal/fakeshopify"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Shopify's GraphQL Admin API (the Admin API to build on: the REST one is
// legacy) meters each app on each store apart in cost points (its
// "GraphQL Admin API rate limits" page): a leaky bucket of points per
// store (throttleStatus's maximumAvailable), restored at a rate set by
// the store's plan (100 points a second on Standard, 200 on Advanced,
// 1,000 on Plus). A query's requested cost is taken as it runs, and what
// it did not use is given back once it has run. So reserve the requested
// cost, which the query's author knows (a connection of first objects
// costs 2 plus first; Shopify's cost debug header tells it too) and puts
// on the context (ContextWithCost), and settle at the actualQueryCost of
// the answer's extensions.cost. A throttled query (error code THROTTLED,
// actualQueryCost null) cost nothing: Counters (shopifyThrottled) read it
// as a refusal, so that it settles at 0, every replica pauses the store
// until its bucket has restored the query's requested cost, and Retries
// sends it again then. Without them, a throttled answer, a 200, would
// pause nothing and go back to the caller as it came.
//
// A Group gives each store its quota: the bucket as a sliding window of
// its size per size/rate seconds, which never overfills it (see
// ExampleGroup_shopify). The sizes here are the stand-in's: read yours
// from throttleStatus.
//
// Three replicas with two goroutines each make 24 queries on each of two
// stores against a stand-in that enforces that accounting. (How many are
// throttled on the way, a call arriving later than its admission's buffer
// allows, is what TestShopifyGraphQLEstimates counts.)
func ExampleGroup_shopifyGraphQL() {
	rdb, stop := embeddedRedis()
	defer stop()
	plans := map[string]fakeshopify.Plan{ // the stand-in's buckets
		"standard-store.myshopify.com": {Points: 200, Restore: 100},
		"plus-store.myshopify.com":     {Points: 1000, Restore: 1000},
	}
	api := fakeshopify.New(fakeshopify.Config{Plans: plans, Seed: 1})
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	replica := func() *http.Client {
		rc := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr}) // each replica its own
		g, err := throttler.NewGroup(rc, "shopify-graphql:", func(store string) (throttler.KeyQuota, error) {
			plan := plans[store] // the app's record of the store's plan
			return throttler.KeyQuota{Limit: plan.Points, Interval: time.Duration(float64(plan.Points) / plan.Restore * float64(time.Second))}, nil
		})
		if err != nil {
			panic(err)
		}
		return &http.Client{Transport: &throttler.Transport{
			Base:     toServer(srv), // in production: nil, the default transport
			Route:    g.Route(func(req *http.Request) (string, bool) { return req.URL.Host, true }),
			Cost:     &throttler.Cost{Actual: actualQueryCost}, // no Estimate: the context's cost
			Counters: shopifyThrottled{},                       // a THROTTLED answer pauses the store
			Retries:  2,                                        // and goes again once the pause is over
		}}
	}
	products := func(ctx context.Context, client *http.Client, store string, first int) error {
		ctx = throttler.ContextWithCost(ctx, 2+first) // the query's requested cost
		body, _ := json.Marshal(map[string]any{
			"query":     "query($first: Int!) { products(first: $first) { nodes { id } } }",
			"variables": map[string]int{"first": first},
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+store+"/admin/api/2025-01/graphql.json", bytes.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body) // the end of the body settles the query
		return resp.Body.Close()
	}

	var wg sync.WaitGroup
	for r := range 3 {
		client := replica()
		for g := range 2 {
			rng := rand.New(rand.NewPCG(uint64(r), uint64(g)))
			wg.Go(func() {
				for range 4 {
					for store := range plans {
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						if err := products(ctx, client, store, 5+rng.IntN(16)); err != nil {
							panic(err)
						}
						cancel()
					}
				}
			})
		}
	}
	wg.Wait()
	for _, store := range []string{"standard-store.myshopify.com", "plus-store.myshopify.com"} {
		fmt.Printf("%s: %d queries answered\n", store, api.Counts(store).Queries)
	}
	// Output:
	// standard-store.myshopify.com: 24 queries answered
	// plus-store.myshopify.com: 24 queries answered
}

// shopifyThrottled is the Counters of the GraphQL Admin API's throttling:
// an answer whose error code is THROTTLED is a refusal of the store's
// bucket (Pause), until the bucket has restored the query's requested
// cost at its restore rate, from the answer's extensions.cost
// (requestedQueryCost, throttleStatus's currentlyAvailable and
// restoreRate); a second when it does not say. It peeks at the first
// bytes of every 200 from a graphql.json endpoint (see Counters.Peek): a
// throttled answer is small, and a longer one is no refusal.
type shopifyThrottled struct{}

func (shopifyThrottled) Peek(resp *http.Response) bool {
	return resp.StatusCode == http.StatusOK && resp.Request != nil && strings.HasSuffix(resp.Request.URL.Path, "/graphql.json")
}

func (shopifyThrottled) Read(resp *http.Response, body []byte, now time.Time) counters.Quota {
	var answer struct {
		Errors []struct {
			Extensions struct{ Code string }
		}
		Extensions struct {
			Cost struct {
				RequestedQueryCost float64
				ThrottleStatus     struct{ CurrentlyAvailable, RestoreRate float64 }
			}
		}
	}
	if json.Unmarshal(body, &answer) != nil {
		return counters.Quota{}
	}
	for _, e := range answer.Errors {
		if e.Extensions.Code != "THROTTLED" {
			continue
		}
		c := answer.Extensions.Cost
		wait := time.Second
		if short := c.RequestedQueryCost - c.ThrottleStatus.CurrentlyAvailable; short > 0 && c.ThrottleStatus.RestoreRate > 0 {
			wait = time.Duration(short / c.ThrottleStatus.RestoreRate * float64(time.Second))
		}
		return counters.Quota{Verdict: counters.Pause, Until: now.Add(wait)}
	}
	return counters.Quota{}
}

// actualQueryCost reads what a GraphQL Admin API query cost from the
// answer's extensions.cost: its actualQueryCost, null (0) for a throttled
// query; false when the tail holds no cost.
func actualQueryCost(_ *http.Response, tail []byte) (int, bool) {
	var answer struct {
		Extensions *struct {
			Cost struct {
				ActualQueryCost *int `json:"actualQueryCost"`
			} `json:"cost"`
		} `json:"extensions"`
	}
	if json.Unmarshal(tail, &answer) != nil || answer.Extensions == nil {
		return 0, false // the estimate stands
	}
	if answer.Extensions.Cost.ActualQueryCost == nil {
		return 0, true // throttled: it cost nothing
	}
	return *answer.Extensions.Cost.ActualQueryCost, true
}

// TestShopifyRecipeHoldsTheBucket: three replicas, each with its own Redis
// client and Group, hammer a Plus store through the recipe's quota (40
// requests per 2s) for three seconds, against the stand-in's strict leaky
// bucket (40 deep, leaking 20 a second): the bucket does not overflow, but
// for at most recipeTolerance requests a loaded machine delayed past the
// buffer.
func TestShopifyRecipeHoldsTheBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	rdb, stop := embeddedRedis()
	defer stop()
	plans := map[string]string{"plus-store.myshopify.com": "plus"}
	api := newFakeShopify(plans)
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := 0
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
		defer c.Close()
		g, err := throttler.NewGroup(c, "shopify-admin:", func(store string) (throttler.KeyQuota, error) {
			return shopifyQuota(plans[store]), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: &throttler.Transport{
			Base:  toServer(srv),
			Route: g.Route(func(req *http.Request) (string, bool) { return req.URL.Host, true }),
		}}
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://plus-store.myshopify.com/admin/api/2024-01/shop.json", nil)
					resp, err := client.Do(req)
					if err != nil {
						continue // the run ended while it waited
					}
					resp.Body.Close()
					mu.Lock()
					sent++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	// 40 at once, then up to 40 more from 2.05s on (the interval and
	// the buffer).
	refused := api.Total().Refused
	t.Logf("%d requests answered in 3s, %d of them 429", sent, refused)
	if sent <= 40 || refused > recipeTolerance {
		t.Fatalf("%d requests answered, %d of them 429; want more than a bucket's 40, at most %d refused", sent, refused, recipeTolerance)
	}
}

// TestShopifyGraphQLEstimates: three replicas with four goroutines each
// query a Standard store (the stand-in's bucket of 200 points, restored at
// 100 a second) for three seconds through the recipe's Group, reserving
// either the requested cost (2 + first) or about what a query uses on
// average (2 + first/2), settled at the actual cost either way; no
// Counters, so that no throttled query pauses the run. The requested cost
// is what the bucket must hold for the query to run: at most
// recipeTolerance throttled, queries a loaded machine delayed past the
// buffer. The average lets queries through that find the bucket short of
// their requested cost: throttled (logged, not asserted: too few in three
// seconds to tell apart from the tolerance).
func TestShopifyGraphQLEstimates(t *testing.T) {
	redistest.Long(t)
	if testing.Short() {
		t.Skip("-short")
	}
	const store = "standard-store.myshopify.com"
	for _, tt := range []struct {
		name     string
		estimate func(first int) int
	}{
		{"requested cost", func(first int) int { return 2 + first }},
		{"average cost", func(first int) int { return 2 + first/2 }},
	} {
		rdb, stop := embeddedRedis()
		api := fakeshopify.New(fakeshopify.Config{Default: fakeshopify.Plan{Points: 200, Restore: 100}, Seed: 1})
		srv := httptest.NewServer(api)
		// The run ends by cancelling its context, not by a deadline: a wait
		// whose slot lies past a deadline fails at once, over and over.
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(3*time.Second, cancel)
		var wg sync.WaitGroup
		for r := range 3 {
			rc := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
			defer rc.Close()
			g, err := throttler.NewGroup(rc, "shopify-graphql:", func(string) (throttler.KeyQuota, error) {
				return throttler.KeyQuota{Limit: 200, Interval: 2 * time.Second}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: &throttler.Transport{Base: toServer(srv),
				Route: g.Route(func(req *http.Request) (string, bool) { return req.URL.Host, true }),
				Cost:  &throttler.Cost{Actual: actualQueryCost}}}
			for g := range 4 {
				rng := rand.New(rand.NewPCG(uint64(r), uint64(g)))
				wg.Go(func() {
					for ctx.Err() == nil {
						first := 5 + rng.IntN(96)
						body, _ := json.Marshal(map[string]any{"query": "{}", "variables": map[string]int{"first": first}})
						req, _ := http.NewRequestWithContext(throttler.ContextWithCost(ctx, tt.estimate(first)), http.MethodPost,
							"https://"+store+"/admin/api/2025-01/graphql.json", bytes.NewReader(body))
						if resp, err := client.Do(req); err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}
				})
			}
		}
		wg.Wait()
		srv.Client().CloseIdleConnections()
		srv.Close()
		stop()
		c := api.Counts(store)
		t.Logf("%s: %d queries answered (%d points, %.0f%% of the 200 + 3s x 100 the bucket gave), %d throttled",
			tt.name, c.Queries, c.Points, 100*float64(c.Points)/500, c.Throttled)
		switch {
		case c.Queries == 0:
			t.Errorf("%s: no query answered", tt.name)
		case tt.name == "requested cost" && c.Throttled > recipeTolerance:
			t.Errorf("%s: %d throttled, want at most %d: the bucket holds the requested cost of every query let through", tt.name, c.Throttled, recipeTolerance)
		}
	}
}

// TestShopifyGraphQLRetriesThrottled: with the recipe's Counters and
// Retries, a query the bucket throttles (a 200 whose error code is
// THROTTLED) pauses the store until the bucket has restored its requested
// cost, settles at 0, and is sent again then and answered: the store's
// window holds what the answered queries cost, and nothing of the
// throttled attempt. The Group's quota here is wider than the bucket (20
// points, restored at 4 a second), so that the second query, sent within
// half a second of the first, is throttled.
func TestShopifyGraphQLRetriesThrottled(t *testing.T) {
	rdb, stop := embeddedRedis()
	defer stop()
	const store = "standard-store.myshopify.com"
	api := fakeshopify.New(fakeshopify.Config{Default: fakeshopify.Plan{Points: 20, Restore: 4}, Seed: 1})
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	g, err := throttler.NewGroup(rdb, "shopify-graphql:", func(string) (throttler.KeyQuota, error) {
		return throttler.KeyQuota{Limit: 1000, Interval: time.Second}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &throttler.Transport{Base: toServer(srv),
		Route:    g.Route(func(req *http.Request) (string, bool) { return req.URL.Host, true }),
		Cost:     &throttler.Cost{Actual: actualQueryCost},
		Counters: shopifyThrottled{}, Retries: 2}}
	query := func() (status int, answer string) {
		body, _ := json.Marshal(map[string]any{"query": "{}", "variables": map[string]int{"first": 18}}) // requests 20 points
		req, _ := http.NewRequestWithContext(throttler.ContextWithCost(context.Background(), 20), http.MethodPost,
			"https://"+store+"/admin/api/2025-01/graphql.json", bytes.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for i := range 2 {
		if status, answer := query(); status != http.StatusOK || strings.Contains(answer, "THROTTLED") {
			t.Fatalf("query %d: %d %s; want it answered", i+1, status, answer)
		}
	}
	c := api.Counts(store)
	th, err := g.For(store)
	if err != nil {
		t.Fatal(err)
	}
	s := th.Stats()
	t.Logf("API: %+v; Throttler: %d units admitted, %d returned, %d pauses", c, s.Admitted, s.Costs.Returned, s.Pauses)
	if c.Queries != 2 || c.Throttled != 1 || s.Pauses != 1 || s.Admitted-s.Costs.Returned != uint64(c.Points) {
		t.Errorf("API %+v, the store's window holds %d points after %d pauses; want 2 answered, 1 throttled, 1 pause, and the answered queries' %d points held",
			c, s.Admitted-s.Costs.Returned, s.Pauses, c.Points)
	}
}
