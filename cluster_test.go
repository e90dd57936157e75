package throttler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestClusterInvariant runs the core invariant through redis.ClusterClient
// on a 3-master Redis Cluster the test starts: replicas each with their own
// ClusterClient, one key (a {tag} keeps related keys in one slot). The
// transaction (with its keyless TIME) must land on the node owning the slot.
func TestClusterInvariant(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	key := "{" + cl.Key(t, "quota") + "}:calls"
	const (
		limit    = 10
		interval = 150 * time.Millisecond
	)
	var rec recorder
	var ths []*Throttler
	for range 3 {
		var c redis.UniversalClient = cl.NewClusterClient()
		ths = append(ths, rec.watch(mustNew(t, c, key, limit, interval)))
	}
	var wg sync.WaitGroup
	for _, th := range ths {
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 6 {
					if err := th.Wait(context.Background()); err != nil {
						t.Errorf("Wait through ClusterClient: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, th := range ths {
		waitIdle(t, th)
	}
	if got := len(rec.scores()); got != 3*5*6 {
		t.Fatalf("%d admissions recorded, want %d", got, 3*5*6)
	}
	assertWindow(t, rec.scores(), interval+50*time.Millisecond, limit)
	// Every member is on the one node that owns the key's slot.
	members := keyMembers(t, cl.NewClusterClient(), key)
	if len(members) == 0 {
		t.Fatal("no members found through the cluster client")
	}
}
