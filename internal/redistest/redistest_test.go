package redistest_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/go-throttler/throttler/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestStartSetGet(t *testing.T) {
	srv := redistest.Start(t)
	if !strings.HasPrefix(srv.Addr(), "127.0.0.1:") && !isExternal() {
		t.Fatalf("Addr() = %q, want 127.0.0.1:PORT", srv.Addr())
	}
	rdb := srv.NewClient()
	key := srv.Key(t, "k")
	if !strings.HasPrefix(key, "test:TestStartSetGet:k:") {
		t.Fatalf("Key = %q", key)
	}
	if other := srv.Key(t, "k"); other == key {
		t.Fatalf("Key returned %q twice", key)
	}
	if err := rdb.Set(ctx(t), key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx(t), key).Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}
}

func TestTwoServersAreSeparate(t *testing.T) {
	if isExternal() {
		t.Skip("REDIS_URL set: both would be the same server")
	}
	a, b := redistest.Start(t), redistest.Start(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("both servers on %s", a.Addr())
	}
	if err := a.NewClient().Set(ctx(t), "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.NewClient().Get(ctx(t), "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET on the other server: %v, want redis.Nil", err)
	}
}

func TestPauseResume(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.NewClient(func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.WriteTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
	})
	if err := rdb.Ping(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}

	srv.Pause(t)
	start := time.Now()
	err := rdb.Ping(ctx(t)).Err()
	if err == nil {
		t.Fatal("PING on a paused server succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("PING on a paused server took %v; want about the read timeout", d)
	}
	t.Logf("PING while paused: %v", err)

	srv.Resume(t)
	// The timed-out connection was dropped; the next PING dials afresh.
	if err := rdb.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestPausedServerIsCleanedUp(t *testing.T) {
	// Cleanup must kill and reap a process left paused.
	srv := redistest.Start(t)
	srv.Pause(t)
}

func TestRestartComesBackEmpty(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	rdb := srv.NewClient()
	key := srv.Key(t, "k")
	if err := rdb.Set(ctx(t), key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	srv.Restart(t)
	if srv.Addr() != addr {
		t.Fatalf("Addr after Restart = %s, want %s", srv.Addr(), addr)
	}
	// The pooled connection died with the old process; go-redis retries.
	if err := rdb.Get(ctx(t), key).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: %v, want redis.Nil (empty server)", err)
	}
}

func TestKillThenRestart(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.NewClient(func(o *redis.Options) { o.MaxRetries = -1 })

	srv.Kill(t)
	if err := rdb.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING on a killed server succeeded")
	}
	srv.Kill(t) // killing twice is harmless

	srv.Restart(t)
	if err := srv.NewClient().Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	if n := len(cl.Addrs()); n != 3 {
		t.Fatalf("Addrs: %d nodes, want 3", n)
	}
	cc := cl.NewClusterClient()

	// Keys in different slots, so on different nodes.
	keys := []string{"a", "b", "c", "d", "e", "f"}
	slots := map[int64]bool{}
	for _, k := range keys {
		slot, err := cc.ClusterKeySlot(ctx(t), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
		if err := cc.Set(ctx(t), k, "v-"+k, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	if len(slots) < 2 {
		t.Fatalf("keys %v all in one slot", keys)
	}
	for _, k := range keys {
		if got, err := cc.Get(ctx(t), k).Result(); err != nil || got != "v-"+k {
			t.Fatalf("GET %s = %q, %v", k, got, err)
		}
	}
	var masters atomic.Int32
	if err := cc.ForEachMaster(ctx(t), func(ctx context.Context, c *redis.Client) error {
		masters.Add(1)
		return c.Ping(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if n := masters.Load(); n != 3 {
		t.Fatalf("ForEachMaster visited %d masters, want 3", n)
	}

	// Keys sharing a {tag} live in one slot and can go in one transaction.
	a, b := "{user42}:a", "{user42}:b"
	cmds, err := cc.TxPipelined(ctx(t), func(p redis.Pipeliner) error {
		p.Incr(ctx(t), a)
		p.IncrBy(ctx(t), b, 5)
		p.Expire(ctx(t), a, time.Minute)
		p.Expire(ctx(t), b, time.Minute)
		return nil
	})
	if err != nil {
		t.Fatalf("TxPipelined: %v", err)
	}
	if got := cmds[1].(*redis.IntCmd).Val(); got != 5 {
		t.Fatalf("INCRBY in the transaction = %d, want 5", got)
	}
	if got, err := cc.Get(ctx(t), a).Result(); err != nil || got != "1" {
		t.Fatalf("GET %s = %q, %v; want 1", a, got, err)
	}
}

func TestClusterNodeRestart(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.NewClusterClient()
	node := cl.Nodes()[0]
	n0 := node.NewClient()

	// A key served by node 0.
	var key string
	for i := 0; key == ""; i++ {
		k := "k" + strconv.Itoa(i)
		if err := cc.Set(ctx(t), k, "v", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if n0.Exists(ctx(t), k).Val() == 1 { // node 0 answers only for its own keys
			key = k
		}
	}

	node.Restart(t)
	// The node keeps its nodes.conf: it rejoins with its slots, but empty.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cc.Get(ctx(t), key).Err()
		if errors.Is(err, redis.Nil) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s after restarting its node: %v, want redis.Nil", key, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := cc.Set(ctx(t), key, "again", time.Minute).Err(); err != nil {
		t.Fatalf("SET after restart: %v", err)
	}
}

func TestClusterTooSmall(t *testing.T) {
	// StartCluster(t, 2) must fail the test it is given.
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		redistest.StartCluster(ft, 2)
	}()
	if !ft.failed {
		t.Fatal("StartCluster(2) did not fail")
	}
}

// fatalRecorder records Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.failed = true
	panic("fatal")
}

func isExternal() bool { return os.Getenv(redistest.URLEnv) != "" }
