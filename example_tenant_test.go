package throttler_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"github.com/go-throttler/throttler"
)

// One key serves every customer: a bulk import's flood of calls does not
// hold another customer's call behind it. Within the process, the calls
// waiting are served in a fair order across tenants.
func ExampleContextWithTenant() {
	rdb, stop := embeddedRedis()
	defer stop()

	t, err := throttler.New(rdb, "openai-org", 2, 200*time.Millisecond)
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var went []string
	call := func(tenant string) {
		ctx := throttler.ContextWithTenant(context.Background(), tenant)
		if err := t.Wait(ctx); err != nil {
			panic(err)
		}
		mu.Lock()
		went = append(went, tenant) // make the call here
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { call("bulk-import") })
	}
	time.Sleep(20 * time.Millisecond) // the import's calls queue
	wg.Go(func() { call("chat") })
	wg.Wait()
	fmt.Println("calls made:", len(went))
	fmt.Println("chat went ahead of the import's last calls:", slices.Index(went, "chat") < 6)
	// Output:
	// calls made: 9
	// chat went ahead of the import's last calls: true
}

// Stats counts what each tenant was admitted and how long its calls
// waited, for up to 100 tenants (the others in Other); the Observer's
// Waited sees every wait's tenant.
func ExampleTenantStats() {
	rdb, stop := embeddedRedis()
	defer stop()

	var mu sync.Mutex
	waits := map[string]int{}
	t, err := throttler.New(rdb, "openai-org", 100, time.Minute, throttler.WithObserver(throttler.Observer{
		Waited: func(_ context.Context, w throttler.WaitInfo) { mu.Lock(); waits[w.Tenant]++; mu.Unlock() },
	}))
	if err != nil {
		panic(err)
	}
	for _, c := range []struct {
		tenant string
		tokens int
	}{{"acme", 3}, {"globex", 1}, {"acme", 2}} {
		ctx := throttler.ContextWithTenant(context.Background(), c.tenant)
		if err := t.WaitN(ctx, c.tokens); err != nil {
			panic(err)
		}
	}
	by := t.Stats().Tenants.ByTenant
	for _, tenant := range slices.Sorted(maps.Keys(by)) {
		c := by[tenant]
		fmt.Printf("%s: %d units in %d waits, %d seen by the Observer\n", tenant, c.Admitted, c.Waits, waits[tenant])
	}
	// Output:
	// acme: 5 units in 2 waits, 2 seen by the Observer
	// globex: 1 units in 1 waits, 1 seen by the Observer
}

// A paying customer's calls weigh twice a free one's: while both have
// calls waiting, the paying one is served about twice as many, in the
// process's order and in the shares across replicas.
func ExampleWithTenantWeight() {
	rdb, stop := embeddedRedis()
	defer stop()

	weight := func(tenant string) float64 {
		if tenant == "paying" {
			return 2
		}
		return 1
	}
	t, err := throttler.New(rdb, "openai-org", 6, 100*time.Millisecond, throttler.WithTenantWeight(weight))
	if err != nil {
		panic(err)
	}
	// The window is full: the calls below queue, and go in the fair order.
	if err := t.WaitN(context.Background(), 6); err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var went []string
	var wg sync.WaitGroup
	for _, tenant := range []string{"paying", "free"} {
		ctx := throttler.ContextWithTenant(context.Background(), tenant)
		for range 12 {
			wg.Go(func() {
				if err := t.Wait(ctx); err != nil {
					panic(err)
				}
				mu.Lock()
				went = append(went, tenant) // make the call here
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	paying := 0
	for _, tenant := range went[:12] {
		if tenant == "paying" {
			paying++
		}
	}
	fmt.Println("of the first 12 calls, the paying customer's are 7 to 9:", paying >= 7 && paying <= 9)
	// Output:
	// of the first 12 calls, the paying customer's are 7 to 9: true
}

// A Transport names each request's tenant from the request itself, here a
// header, when its context carries none; a request without the header is
// of no tenant.
func ExampleTransport_tenant() {
	rdb, stop := embeddedRedis()
	defer stop()

	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer api.Close()
	t, err := throttler.New(rdb, "partner-api", 100, time.Second)
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &throttler.Transport{
		Route:  t.Route(),
		Tenant: func(r *http.Request) string { return r.Header.Get("X-Merchant") },
	}}
	for _, merchant := range []string{"m-17", "m-42", "m-17", ""} {
		req, _ := http.NewRequest("GET", api.URL, nil)
		if merchant != "" {
			req.Header.Set("X-Merchant", merchant)
		}
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
	}
	s := t.Stats()
	for _, merchant := range slices.Sorted(maps.Keys(s.Tenants.ByTenant)) {
		fmt.Printf("%s: %d calls\n", merchant, s.Tenants.ByTenant[merchant].Admitted)
	}
	fmt.Println("all calls:", s.Admitted)
	// Output:
	// m-17: 2 calls
	// m-42: 1 calls
	// all calls: 4
}

// A reader that turns Stats' per-tenant counts into counters (for a
// metrics system of its own) keeps, for each tenant, the Since it last
// saw: counts under a new Since started again when the tenant left the
// table and came back, and add to what it had, rather than read as a
// drop. It sees every admission only as the one caller of Stats.
func ExampleTenantCounts() {
	rdb, stop := embeddedRedis()
	defer stop()

	t, err := throttler.New(rdb, "openai-org", 100, 100*time.Millisecond)
	if err != nil {
		panic(err)
	}
	type counter struct {
		since      time.Time
		base, last uint64
	}
	counters := map[string]*counter{}
	read := func() {
		for tenant, c := range t.Stats().Tenants.ByTenant {
			k := counters[tenant]
			if k == nil {
				k = &counter{since: c.Since}
				counters[tenant] = k
			}
			if !c.Since.Equal(k.since) { // the counts started again
				k.base, k.since = k.base+k.last, c.Since
			}
			k.last = c.Admitted
		}
	}
	acme := throttler.ContextWithTenant(context.Background(), "acme")
	if err := t.WaitN(acme, 2); err != nil {
		panic(err)
	}
	read()
	// acme idles past the window: the next snapshot lets it go from the
	// table. Its next wait starts its counts again.
	time.Sleep(300 * time.Millisecond)
	read()
	if err := t.WaitN(acme, 3); err != nil {
		panic(err)
	}
	read()
	k := counters["acme"]
	fmt.Println("Stats showed acme's units:", k.last)
	fmt.Println("the reader's counter:", k.base+k.last)
	// Output:
	// Stats showed acme's units: 3
	// the reader's counter: 5
}

// TenantFromContext tells the tenant a call's context carries, as a
// function of the caller's (a log line, a route) may want it.
func ExampleTenantFromContext() {
	ctx := throttler.ContextWithTenant(context.Background(), "acme")
	tenant, ok := throttler.TenantFromContext(ctx)
	fmt.Println(tenant, ok)
	_, ok = throttler.TenantFromContext(throttler.ContextWithTenant(ctx, ""))
	fmt.Println("after the empty tenant:", ok)
	// Output:
	// acme true
	// after the empty tenant: false
}
