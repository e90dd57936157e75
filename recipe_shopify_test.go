package throttler_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/redis/go-redis/v9"
)

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
	defer api.Close()
	defer api.Client().CloseIdleConnections()

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
			Base:  toServer(api.Server),
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
	if sent <= 40 || api.refused() > 0 {
		t.Fatalf("%d requests answered, %d of them 429; want more than a bucket's 40, none refused", sent, api.refused())
	}
	t.Logf("%d requests answered in 3s, none refused", sent)
}
