// Package fakeshopify is a fake of Shopify's Admin API as its rate limits
// meter it, each app on each store apart (the store is the request's
// host). The recipes' examples and tests call it through the throttler.
//
// The REST Admin API (Shopify's "REST Admin API rate limits" page, a
// legacy API since October 2024): each store has a leaky bucket of
// Plan.Requests requests (40) that leaks Plan.Leak requests a second (2 on
// the Standard plan, 4 on Advanced, 20 on Plus). A request that finds the
// bucket full is answered 429 and counts nothing; every other answer
// states the bucket in X-Shopify-Shop-Api-Call-Limit, such as "32/40".
//
// The GraphQL Admin API (Shopify's "GraphQL Admin API rate limits" page):
// each store has a leaky bucket of Plan.Points points (the
// throttleStatus's maximumAvailable) restored at Plan.Restore points a
// second (the page gives 100 on Standard, 200 on Advanced, 1,000 on Plus).
// A query costs what its fields may return: here a connection of "first"
// objects (the variable "first", 1 to 250) costs 2 plus first, as the
// page prices a connection. The requested cost is taken from the bucket
// when the query runs, and the difference between requested and actual
// cost (2 plus the objects it returned, drawn at random in [0, first]
// from a seeded generator) is given back once it has run. A query whose
// requested cost exceeds what the bucket has is throttled: answered with
// an error whose code is THROTTLED and an actualQueryCost of null, and it
// costs nothing. Shopify's page shows that body but not its status (reports
// differ); the fake answers 200, the case a client that reads statuses
// only would miss. Every answer carries extensions.cost: requestedQueryCost,
// actualQueryCost and throttleStatus (maximumAvailable, currentlyAvailable,
// restoreRate).
package fakeshopify

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Plan is a store's rate limits.
type Plan struct {
	// Requests is the REST bucket's size, Leak how many requests it leaks
	// a second.
	Requests int
	Leak     float64
	// Points is the GraphQL bucket's size, Restore how many points it
	// restores a second.
	Points  int
	Restore float64
}

// Config sets the API's stores and pace.
type Config struct {
	// Plans gives each store's plan, by host; Default is the plan of the
	// others.
	Plans   map[string]Plan
	Default Plan
	// Seed seeds the objects a query returns.
	Seed uint64
	// Now reads the time; default time.Now. It is called with the API's
	// mutex held and must not go backwards.
	Now func() time.Time
}

// API is the fake. It implements http.Handler and is safe for concurrent
// use. Create one with New.
type API struct {
	cfg Config

	mu     sync.Mutex
	rng    *rand.Rand
	stores map[string]*store
}

// store is one store's buckets and what it answered.
type store struct {
	plan      Plan
	level     float64 // REST: requests in the bucket
	available float64 // GraphQL: points left
	last      time.Time
	counts    Counts
}

// Counts are what the API answered for one store.
type Counts struct {
	// REST requests answered, and refused (429).
	Requests, Refused int
	// GraphQL queries answered, and throttled.
	Queries, Throttled int
	// Points is the actual cost of the queries answered.
	Points int
}

// New returns an API with cfg's stores.
func New(cfg Config) *API {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &API{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5409)), stores: map[string]*store{}}
}

// store returns host's store, its buckets leaked and restored to now.
func (a *API) store(host string, now time.Time) *store {
	s, ok := a.stores[host]
	if !ok {
		plan, ok := a.cfg.Plans[host]
		if !ok {
			plan = a.cfg.Default
		}
		s = &store{plan: plan, available: float64(plan.Points), last: now}
		a.stores[host] = s
	}
	dt := now.Sub(s.last).Seconds()
	s.level = max(0, s.level-dt*s.plan.Leak)
	s.available = min(float64(s.plan.Points), s.available+dt*s.plan.Restore)
	s.last = now
	return s
}

// ServeHTTP answers POST .../graphql.json as the GraphQL Admin API, and
// any other request as the REST Admin API.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/graphql.json") {
		a.graphQL(w, r)
		return
	}
	a.mu.Lock()
	s := a.store(r.Host, a.cfg.Now())
	full := s.level+1 > float64(s.plan.Requests)
	if full {
		s.counts.Refused++
	} else {
		s.level++
		s.counts.Requests++
	}
	used, size := int(math.Ceil(s.level)), s.plan.Requests
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if full {
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintln(w, `{"errors":"Exceeded the rate limit. Reduce request rates to resume uninterrupted service."}`)
		return
	}
	w.Header().Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", used, size))
	fmt.Fprintln(w, `{"shop":{"name":"a store"}}`)
}

// graphQL answers a query; see the package documentation.
func (a *API) graphQL(w http.ResponseWriter, r *http.Request) {
	var q struct {
		Query     string `json:"query"`
		Variables struct {
			First *int `json:"first"`
		} `json:"variables"`
	}
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&q) != nil || q.Variables.First == nil ||
		*q.Variables.First < 1 || *q.Variables.First > 250 {
		http.Error(w, `{"errors":[{"message":"a POST with variables.first from 1 to 250"}]}`, http.StatusBadRequest)
		return
	}
	first := *q.Variables.First
	requested := 2 + first
	a.mu.Lock()
	s := a.store(r.Host, a.cfg.Now())
	cost := map[string]any{"requestedQueryCost": requested, "actualQueryCost": nil}
	body := map[string]any{"extensions": map[string]any{"cost": cost}}
	if float64(requested) > s.available {
		s.counts.Throttled++
		body["errors"] = []any{map[string]any{"message": "Throttled", "extensions": map[string]string{"code": "THROTTLED"}}}
	} else {
		returned := a.rng.IntN(first + 1)
		actual := 2 + returned
		// The requested cost is taken as the query runs and the
		// difference given back once it has run: at once here, so the
		// bucket loses the actual cost.
		s.available -= float64(actual)
		s.counts.Queries++
		s.counts.Points += actual
		cost["actualQueryCost"] = actual
		nodes := make([]any, returned)
		for i := range nodes {
			nodes[i] = map[string]string{"id": fmt.Sprintf("gid://shopify/Product/%d", i+1)}
		}
		body["data"] = map[string]any{"products": map[string]any{"nodes": nodes}}
	}
	cost["throttleStatus"] = map[string]any{"maximumAvailable": s.plan.Points, "currentlyAvailable": int(s.available), "restoreRate": s.plan.Restore}
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(body)
}

// Counts returns what the API answered for host's store.
func (a *API) Counts(host string) Counts {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.stores[host]; ok {
		return s.counts
	}
	return Counts{}
}

// Total returns what the API answered for every store.
func (a *API) Total() Counts {
	a.mu.Lock()
	defer a.mu.Unlock()
	var t Counts
	for _, s := range a.stores {
		t.Requests += s.counts.Requests
		t.Refused += s.counts.Refused
		t.Queries += s.counts.Queries
		t.Throttled += s.counts.Throttled
		t.Points += s.counts.Points
	}
	return t
}
