package throttler_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-throttler/throttler"
)

// When the quota runs short, a call that would wait longer than it is
// worth fails at once, without a Redis round trip when the last reply
// already shows it, and a user's call goes before a batch job's.
func ExampleWithMaxWait() {
	rdb, stop := embeddedRedis()
	defer stop()

	t, err := throttler.New(rdb, "search-api", 2, time.Second,
		throttler.WithMaxWait(100*time.Millisecond), // a user gives up sooner than that anyway
		throttler.WithMaxQueue(1000))                // beyond, shed the lowest priority
	if err != nil {
		panic(err)
	}
	ctx := throttler.ContextWithPriority(context.Background(), throttler.PriorityHigh)
	for range 2 {
		if err := t.Wait(ctx); err != nil {
			panic(err)
		}
	}
	err = t.Wait(ctx) // the next slot is a second away
	fmt.Println(errors.Is(err, throttler.ErrMaxWait), errors.Is(err, context.DeadlineExceeded))
	fmt.Println("turned away for", throttler.RejectedMaxWait, t.Stats().Rejected[throttler.RejectedMaxWait], "time")
	// Output:
	// true true
	// turned away for max wait 1 time
}
