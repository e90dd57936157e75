package throttler_test

import (
	"context"
	"fmt"
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
