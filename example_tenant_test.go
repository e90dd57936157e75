package throttler_test

import (
	"context"
	"fmt"
	"maps"
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
