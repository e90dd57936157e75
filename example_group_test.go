package throttler_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/redis/go-redis/v9"
)

// An API that gives each customer its own quota, by plan: every replica
// makes a Group with the same prefix and limits function, and each
// customer's calls share that customer's quota across the replicas. A
// customer's Throttler is made on first use and dropped once idle.
func ExampleGroup() {
	rdb, stop := embeddedRedis()
	defer stop()

	perSecond := map[string]int{"acme": 3, "globex": 1} // by customer
	limits := func(customer string) (throttler.KeyQuota, error) {
		n, ok := perSecond[customer]
		if !ok {
			n = 1 // the free plan
		}
		return throttler.KeyQuota{Limit: n, Interval: time.Second}, nil
	}
	replica := func() *throttler.Group {
		// Each replica has its own Redis client and Group.
		client := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
		g, err := throttler.NewGroup(client, "partner-api:", limits)
		if err != nil {
			panic(err)
		}
		return g
	}
	a, b := replica(), replica()

	ctx := context.Background()
	allowed := func(g *throttler.Group, customer string) bool {
		t, err := g.For(customer) // call For for each call: it is a map lookup
		if err != nil {
			panic(err)
		}
		res, err := t.Allow(ctx)
		if err != nil {
			panic(err)
		}
		return res.Allowed
	}
	fmt.Println("acme:  ", allowed(a, "acme"), allowed(b, "acme"), allowed(a, "acme"), allowed(b, "acme"))
	fmt.Println("globex:", allowed(b, "globex"), allowed(a, "globex"))

	// Wait delays a call instead: the second globex call of the second.
	t, _ := a.For("globex")
	start := time.Now()
	if err := t.Wait(ctx); err != nil {
		panic(err)
	}
	fmt.Println("globex waited for the next second:", time.Since(start) > 500*time.Millisecond)
	// Output:
	// acme:   true true true false
	// globex: true false
	// globex waited for the next second: true
}

// A service calls an API with each customer's own token: route each
// request to its token's Throttler by a digest of the Authorization
// header, so that no token is kept, logged or sent to Redis. Requests
// without the header go to a Throttler of their own here; without it, they
// would go unthrottled.
func ExampleGroup_Route() {
	rdb, stop := embeddedRedis()
	defer stop()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer api.Close()
	defer api.Client().CloseIdleConnections()

	// Every token gets 2 calls an hour; the limits function sees a digest.
	g, err := throttler.NewGroup(rdb, "partner-api:", func(digest string) (throttler.KeyQuota, error) {
		return throttler.KeyQuota{Limit: 2, Interval: time.Hour}, nil
	})
	if err != nil {
		panic(err)
	}
	anonymous, err := throttler.New(rdb, "partner-api:anonymous", 60, time.Hour)
	if err != nil {
		panic(err)
	}
	byToken := g.Route(throttler.ByHeader("Authorization"))
	client := &http.Client{Transport: &throttler.Transport{
		Base: api.Client().Transport,
		Route: func(req *http.Request) *throttler.Throttler {
			if t := byToken(req); t != nil {
				return t
			}
			return anonymous
		},
	}}

	call := func(token string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	fmt.Println("token A:", call("token-A"), call("token-A"))
	fmt.Println("token B:", call("token-B"))
	// The hour's third call on token A cannot go within the minute: it
	// fails at once.
	fmt.Println("token A, third:", errors.Is(call("token-A"), context.DeadlineExceeded))
	fmt.Println("no token:", call(""))
	// Output:
	// token A: <nil> <nil>
	// token B: <nil>
	// token A, third: true
	// no token: <nil>
}
