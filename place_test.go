package throttler

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/netfault"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// A replica whose replies come back late (a lopsided link: 60ms down, at
// 100 calls a second, where the window frees a slot every 10ms) has Redis
// place its claims near the limit (redisstore.PlaceScript), beside two
// replicas on a fast link that place their own: the window holds, and
// every admitted call's member sits in Redis at the score its caller was
// given (a placed claim's waiter goes at the placed score, not the one its
// plan worked out). On miniredis and on redis-server.
func TestSlowLinkClaimsPlacedByRedis(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const limit, interval = 20, 200 * time.Millisecond
		c := dial()
		proxy, err := netfault.Listen(c.(*redis.Client).Options().Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		proxy.SetDelay(0, 60*time.Millisecond)
		var rec recorder
		ths := []*Throttler{
			rec.watch(mustNew(t, dial(func(o *redis.Options) { o.Addr = proxy.Addr() }), key, limit, interval)),
			rec.watch(mustNew(t, dial(), key, limit, interval)),
			rec.watch(mustNew(t, dial(), key, limit, interval)),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		for _, th := range ths {
			for range 6 {
				wg.Go(func() {
					for ctx.Err() == nil {
						if err := th.Wait(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("Wait: %v", err)
						}
					}
				})
			}
		}
		wg.Wait()
		for _, th := range ths {
			waitIdle(t, th)
		}
		assertWindow(t, rec.scores(), interval, limit)
		// The slow replica's rounds ran the script: the server keeps the
		// scripts it ran.
		if ok, err := c.ScriptExists(context.Background(), redisstore.PlaceScript.Hash()).Result(); err != nil || !ok[0] {
			t.Fatalf("SCRIPT EXISTS of the place script: %v, %v: no round had Redis place its claims", ok, err)
		}
		inSet := calls(t, c, key)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		checked := 0
		for _, a := range rec.list {
			for _, m := range a.members {
				if s, ok := inSet[m]; ok {
					checked++
					if s != a.score {
						t.Errorf("member %s is at %d in Redis; its caller went by %d", m, s, a.score)
					}
				}
			}
		}
		if checked == 0 {
			t.Fatal("no admitted call's member left in the set to compare")
		}
		t.Logf("%d calls admitted, %d compared with the set", len(rec.list), checked)
	})
}

// A claim the store placed is written at its placed score, and one it
// found no room for is not known to be written: given back, it goes
// plainly, never as written for sure (which, for a member never written
// on a compacted key, would take another call out of its bucket).
func TestWrittenAtOfClaimsPlacedByTheStore(t *testing.T) {
	rd := &round{}
	rd.Plan.Claims = []core.Claim{{Score: 500}, {Score: 700}, {Score: 900}}
	for _, tc := range []struct {
		placed []int64
		gone   []bool
		want   []int64
	}{
		{nil, nil, []int64{500, 700, 900}},                // the process placed them
		{[]int64{0, 700, 900}, nil, []int64{0, 700, 900}}, // no room for the first
		{[]int64{0, 700}, nil, []int64{0, 700, 0}},        // nothing answered for the last
		{[]int64{500, 700, 900}, []bool{false, true, false}, []int64{500, notInStore, 900}},
	} {
		rd.Reply.Placed, rd.gone = tc.placed, tc.gone
		for i, want := range tc.want {
			if got := rd.writtenAt(i); got != want {
				t.Errorf("placed %v, gone %v: claim %d written at %d, want %d", tc.placed, tc.gone, i, got, want)
			}
		}
	}
}
