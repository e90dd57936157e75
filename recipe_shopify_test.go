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
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/fakeshopify"
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
// actualQueryCost null) cost nothing: it settles at 0.
//
// A Group gives each store its quota: the bucket as a sliding window of
// its size per size/rate seconds, which never overfills it (see
// ExampleGroup_shopify). The sizes here are the stand-in's: read yours
// from throttleStatus.
//
// Three replicas with two goroutines each make 24 queries on each of two
// stores against a stand-in that enforces that accounting.
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
			Base:  toServer(srv), // in production: nil, the default transport
			Route: g.Route(func(req *http.Request) (string, bool) { return req.URL.Host, true }),
			Cost:  &throttler.Cost{Actual: actualQueryCost}, // no Estimate: the context's cost
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
		c := api.Counts(store)
		fmt.Printf("%s: %d queries answered, %d throttled\n", store, c.Queries, c.Throttled)
	}
	// Output:
	// standard-store.myshopify.com: 24 queries answered, 0 throttled
	// plus-store.myshopify.com: 24 queries answered, 0 throttled
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

// TestShopifyRecipeNo429s: three replicas, each with its own Redis client
// and Group, hammer a Plus store through the recipe's quota (40 requests
// per 2s) for three seconds, against the stand-in's strict leaky bucket
// (40 deep, leaking 20 a second): the bucket never overflows.
func TestShopifyRecipeNo429s(t *testing.T) {
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
	if refused := api.Total().Refused; sent <= 40 || refused > 0 {
		t.Fatalf("%d requests answered, %d of them 429; want more than a bucket's 40, none refused", sent, refused)
	}
	t.Logf("%d requests answered in 3s, none refused", sent)
}

// TestShopifyGraphQLEstimates: three replicas with four goroutines each
// query a Standard store (the stand-in's bucket of 200 points, restored at
// 100 a second) for three seconds through the recipe's Group, reserving
// either the requested cost (2 + first) or about what a query uses on
// average (2 + first/2), settled at the actual cost either way. The
// requested cost is what the bucket must hold for the query to run: none
// throttled, whatever the machine. The average lets queries through that
// find the bucket short of their requested cost: throttled (logged, not
// asserted: 1 or 2 in three seconds in four runs).
func TestShopifyGraphQLEstimates(t *testing.T) {
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
		case tt.name == "requested cost" && c.Throttled != 0:
			t.Errorf("%s: %d throttled, want none: the bucket holds the requested cost of every query let through", tt.name, c.Throttled)
		}
	}
}
