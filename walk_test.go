package throttler

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// walk selects what TestWalk runs, for internal/coresize -walk, which
// compares the coverage of the two: "new" makes a Throttler; "wait" makes
// one and then waits once, uncontended, far from the limit.
var walk = flag.String("walk", "", `TestWalk: "new", or "wait" (see internal/coresize -walk)`)

// TestWalk is not a test but the run internal/coresize -walk measures: the
// functions one Wait passes through, from the face to Redis and back, are
// those the "wait" run covers and the "new" run does not.
func TestWalk(t *testing.T) {
	if *walk == "" {
		t.Skip("run by internal/coresize -walk")
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	th, err := New(rdb, "walk", 100, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if *walk == "wait" {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
