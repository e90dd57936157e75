package throttler

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var groupKeys = flag.Int("group.keys", 1000, "TestGroupManyKeys: how many keys to touch once each")

// TestGroupManyKeys touches -group.keys keys once each (For, then Wait)
// in one Group, then checks that eviction gives everything back: every
// key evicted, the goroutines back to what they were before, and, once
// the window and its TTL have passed, no Redis key left. It reports the
// heap in use after a GC before, while every key is held, and after
// eviction, without asserting on them; the figures in docs/benchmarks.md
// come from
//
//	go test -run TestGroupManyKeys -group.keys 100000 -v .
func TestGroupManyKeys(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		mr, c := miniClient(t)
		t.Log("the heap holds the embedded miniredis's data too (its maps keep their size once keys expire): see the redis subtest for the library's")
		groupManyKeys(t, c, "quota", mr.FastForward)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		groupManyKeys(t, srv.NewClient(), srv.Key(t, "quota"), time.Sleep)
	})
}

// groupManyKeys is TestGroupManyKeys on c, under prefix key; pass lets
// time pass for Redis's TTLs.
func groupManyKeys(t *testing.T, c redis.UniversalClient, key string, pass func(time.Duration)) {
	n := *groupKeys
	if raceEnabled {
		n = min(n, 1000)
	}
	ctx := context.Background()
	q := KeyQuota{Limit: 10, Interval: time.Second}
	// The run's connections, and what else the first calls set up, are
	// in the baseline: a warm-up Group touches keys first.
	warmPool(t, c, 8)
	warm := mustGroup(t, c, key+":warm:", q)
	for i := range 100 {
		if err := mustFor(t, warm, fmt.Sprint(i)).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	warm.Sweep()
	prefix := key + ":"
	baseHeap, baseG, baseConns := heapInUse(), runtime.NumGoroutine(), conns(c)

	g := mustGroup(t, c, prefix, q)
	start := time.Now()
	for i := range n {
		th, err := g.For(fmt.Sprint("customer-", i))
		if err == nil {
			err = th.Wait(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	touched := time.Since(start)
	// The hand evicted keys already, as For went on: count what is
	// left, then let every slot pass by the buffer and sweep.
	held := g.Len()
	heldHeap := heapInUse()
	time.Sleep(100 * time.Millisecond)
	g.Sweep()
	if g.Len() != 0 {
		t.Fatalf("%d keys still held after Sweep", g.Len())
	}
	deadline := time.Now().Add(10 * time.Second)
	for ours() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	evictedHeap, afterG := heapInUse(), runtime.NumGoroutine()
	if n := ours(); n > 0 {
		t.Errorf("%d goroutines of Throttlers after eviction", n)
	}

	th := mustNew(t, c, "probe", q.Limit, q.Interval) // for the TTL of the keys
	wait := th.rules.TTL() + 500*time.Millisecond
	pass(wait)
	afterHeap := heapInUse() // miniredis's keys, in this process, have expired too
	left, err := c.Keys(ctx, key+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("%d Redis keys left %s after the last call, e.g. %q", len(left), wait, left[0])
	}
	t.Logf("%d keys touched once in %s (%.0fµs a key); %d still held when the last was touched",
		n, touched.Round(time.Millisecond), float64(touched.Microseconds())/float64(n), held)
	t.Logf("heap in use: %s before, %s with %d keys held (%+d bytes a key), %s after eviction (%+d bytes), %s once the window's keys expired (%+d bytes)",
		mib(baseHeap), mib(heldHeap), held, perKey(heldHeap, baseHeap, held),
		mib(evictedHeap), int64(evictedHeap)-int64(baseHeap), mib(afterHeap), int64(afterHeap)-int64(baseHeap))
	t.Logf("goroutines: %d before, %d after, none of Throttlers; the client's pooled connections: %d before, %d after; Redis keys left %s after: %d",
		baseG, afterG, baseConns, conns(c), wait, len(left))
	runtime.KeepAlive(g)
}

// warmPool opens n of c's pooled connections at once, and puts them back.
func warmPool(t *testing.T, c redis.UniversalClient, n int) {
	rc, ok := c.(*redis.Client)
	if !ok {
		t.Fatalf("warmPool: %T", c)
	}
	var conns []*redis.Conn
	for range n {
		cn := rc.Conn()
		if err := cn.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	for _, cn := range conns {
		cn.Close()
	}
}

// conns counts c's pooled connections (each holds its read and write
// buffers, and with miniredis, the server's goroutine for it).
func conns(c redis.UniversalClient) uint32 { return c.PoolStats().TotalConns }

// ours counts the goroutines running a method of the package's types
// (workers, lease keepers, round trips in a helper goroutine).
func ours() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/go-throttler/throttler.(*") {
			count++
		}
	}
	return count
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func mib(b uint64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }

func perKey(held, base uint64, n int) int64 {
	if n == 0 {
		return 0
	}
	return (int64(held) - int64(base)) / int64(n)
}

// BenchmarkGroupHotKey: one goroutine calling Wait on one key, far below
// its limit, on a real redis-server: through a plain Throttler, and
// through a Group, For then Wait on every call. "For" is For alone, on a
// key the Group holds.
func BenchmarkGroupHotKey(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	q := KeyQuota{Limit: 1 << 30, Interval: time.Second}
	b.Run("plain", func(b *testing.B) {
		th := mustNew(b, srv.NewClient(), srv.Key(b, "hot"), q.Limit, q.Interval)
		b.ReportAllocs()
		for b.Loop() {
			if err := th.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("group", func(b *testing.B) {
		g := mustGroup(b, srv.NewClient(), srv.Key(b, "hot")+":", q)
		b.ReportAllocs()
		for b.Loop() {
			th, err := g.For("customer-42")
			if err == nil {
				err = th.Wait(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("For", func(b *testing.B) {
		g := mustGroup(b, srv.NewClient(), srv.Key(b, "hot")+":", q)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := g.For("customer-42"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
