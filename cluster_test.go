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

// TestClusterInFlight caps calls in flight through ClusterClients, with
// settled costs and a second limit: the lease script runs in the rate's
// transaction on the slot's node, and releases reach the waiters of every
// replica through the cluster's Pub/Sub.
func TestClusterInFlight(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	tag := "{" + cl.Key(t, "quota") + "}"
	var ths []*Throttler
	for range 3 {
		var c redis.UniversalClient = cl.NewClusterClient()
		ths = append(ths, mustNew(t, c, tag+":rate", 1000, time.Second, WithLogger(quiet),
			WithLimit(tag+":hour", 5000, time.Hour), WithInFlight(tag+":inflight", 2, 0)))
	}
	var c concurrency
	var wg sync.WaitGroup
	for _, th := range ths {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					err := th.DoCost(context.Background(), 2, func(context.Context) (int, error) {
						c.enter()
						defer c.leave()
						time.Sleep(2 * time.Millisecond)
						return 1, nil
					})
					if err != nil {
						t.Errorf("DoCost through ClusterClient: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if m := c.most.Load(); m > 2 {
		t.Fatalf("%d calls in flight at once, cap 2", m)
	}
	for _, th := range ths {
		waitKeeperIdle(t, th)
		waitIdle(t, th)
	}
	check := cl.NewClusterClient()
	if n := len(keyMembers(t, check, tag+":inflight")); n != 0 {
		t.Fatalf("%d places taken after every call ended", n)
	}
	// Every call settled from 2 units down to 1 (the hour's key: the
	// second's may have been trimmed already).
	if n := len(calls(t, check, tag+":hour")); n != 60 {
		t.Fatalf("the hour's key holds %d members, want 60", n)
	}
	waits := uint64(0)
	for _, th := range ths {
		waits += th.Stats().Places.Waits
	}
	if waits == 0 {
		t.Fatal("no call waited for a place: the test did not fill the cap")
	}
}

// TestClusterTenantShares holds three tenants to a third each through
// ClusterClients, on a key with a second limit in its slot: the tenants'
// scans and cap checks (TenantPeakScript, TenantScoresScript) run on the
// slot's node beside the rate's round trip, and no window of either limit
// holds more than its limit (skewedShares checks the first; the second is
// never reached).
func TestClusterTenantShares(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	tag := "{" + cl.Key(t, "quota") + "}"
	dial := func(configure ...func(*redis.Options)) redis.UniversalClient {
		if len(configure) > 0 {
			t.Fatal("a cluster client takes no redis.Options")
		}
		return cl.NewClusterClient()
	}
	shares := skewedShares(t, dial, tag+":rate", WithLimit(tag+":day", 100_000, 24*time.Hour))
	for _, tenant := range []string{"a", "b", "c"} {
		if share := shares[tenant]; share < 0.25 || share > 0.42 {
			t.Errorf("tenant %s had %.0f%% of the calls through the cluster, want about a third", tenant, share*100)
		}
	}
	if n := len(calls(t, cl.NewClusterClient(), tag+":day")); n == 0 {
		t.Fatal("the second limit's key holds no call")
	}
}
