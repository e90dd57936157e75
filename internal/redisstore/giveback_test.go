package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Calls given back after a compaction moved them leave their bucket when
// they were written for sure (Remove with their score), and only then:
// a plain give-back, a call too old to tell from a trimmed one, and debt
// keep counting; a bucket never drops below what it holds; members still
// in the set are removed as ZREM would. Every count and tail stays what
// the calls left give.
func TestGiveBackLeavesBuckets(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, mr *miniredis.Miniredis) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(7, 8))
		key := redistest.Key(t, "give-back")
		x := core.Window{Key: key, Limit: 100_000, Interval: 10 * time.Second, W: 10_000_000, Bucket: 10_000, Age: 1_000}
		s := NewStore(c, []core.Window{x}, 0, nil, "self")
		now := serverNow(t, c)
		calls := map[string]int64{}
		group := func(name string, at int64, n int) []string {
			var ms []string
			var zs []redis.Z
			for i := range n {
				m := fmt.Sprint(name, i)
				ms = append(ms, m)
				calls[m] = at
				zs = append(zs, redis.Z{Score: float64(at), Member: m})
			}
			if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
				t.Fatal(err)
			}
			return ms
		}
		settled := group("settled", now-2_000_000, 6)
		plain := group("plain", now-1_000_000, 4)
		old := group("old", now-9_990_000, 3) // within W now, not once the script runs late
		debt := group(core.DebtPrefix+"d", now-3_000_000, 2)
		group("other", now-2_000_000, 5) // the settled calls' bucket holds these too
		early := group("early", now-4_000_000, 3)
		late := group("late", now-1_500_000, 3)
		if err := CompactScript.Run(ctx, c, []string{key, CompactKey(key)}, x.Bucket, x.Age, x.W+2_000_000, 60000, BucketMember, CompactBatch, RebuildFrom, 0, StampMember, DenseBucket).Err(); err != nil {
			t.Fatal(err)
		}
		young := group("young", now+5_000_000, 3) // after the cut: still members
		checkCompacted(t, c, key, calls, rng, "compacted")
		if mr != nil {
			mr.SetTime(time.UnixMicro(now + 20_000)) // the old calls age out of W
		} else {
			time.Sleep(20 * time.Millisecond)
		}

		giveBack := func(members []string, at int64, gone bool) {
			t.Helper()
			if err := s.Remove(ctx, members, at); err != nil {
				t.Fatal(err)
			}
			if gone {
				for _, m := range members {
					delete(calls, m)
				}
			}
			checkCompacted(t, c, key, calls, rng, fmt.Sprintf("after giving back %q at %d", members, at))
		}
		giveBack(settled[:4], now-2_000_000, true)
		giveBack(plain, 0, false)                  // may not have been written: stays counted
		giveBack(old, now-9_990_000, false)        // may have been trimmed, not moved
		giveBack(debt, now-3_000_000, false)       // debt is never given back
		giveBack(young[:2], now+5_000_000, true)   // still members: removed
		giveBack(young[2:], 0, true)               // so, plainly
		giveBack(settled[4:], now-2_000_000, true) // the rest of them

		// A round trip's give-backs: calls of two buckets at once.
		var back []core.Entry
		for _, m := range append(early[:2], late...) {
			back = append(back, core.Entry{Score: calls[m], Member: m})
			delete(calls, m)
		}
		if _, err := s.Reserve(ctx, &core.Attempt{Lims: []int{x.Limit}, Removals: core.Removals{GiveBack: back}}); err != nil {
			t.Fatal(err)
		}
		checkCompacted(t, c, key, calls, rng, "after a round trip gave back calls of two buckets")

		// A bucket never drops below what it holds: ten more given back
		// than the five left there leave it empty, not negative.
		var ghosts []string
		for i := range 10 {
			ghosts = append(ghosts, fmt.Sprint("ghost", i))
		}
		if err := s.Remove(ctx, ghosts, now-2_000_000); err != nil {
			t.Fatal(err)
		}
		for m, at := range calls {
			if at == now-2_000_000 {
				delete(calls, m)
			}
		}
		checkCompacted(t, c, key, calls, rng, "after giving back more than the bucket holds")
	})
}

// A give-back of calls written for sure whose reply is lost after Redis
// applied it is not sent again by the client (it goes as a transaction):
// each call leaves its bucket once, never twice, which would let a window
// hold more than its limit.
func TestGiveBackOnceWhenItsReplyIsLost(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, mr *miniredis.Miniredis) {
		ctx := context.Background()
		key := redistest.Key(t, "give-back-once")
		x := core.Window{Key: key, Limit: 100_000, Interval: 10 * time.Second, W: 10_000_000, Bucket: 10_000, Age: 1_000}
		now := serverNow(t, c)
		calls := map[string]int64{}
		var zs []redis.Z
		var settled []string
		for i := range 10 {
			m := fmt.Sprint("call", i)
			calls[m] = now - 2_000_000
			zs = append(zs, redis.Z{Score: float64(calls[m]), Member: m})
			if i < 4 {
				settled = append(settled, m)
			}
		}
		if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
			t.Fatal(err)
		}
		if err := CompactScript.Run(ctx, c, []string{key, CompactKey(key)}, x.Bucket, x.Age, x.W+2_000_000, 60000, BucketMember, CompactBatch, RebuildFrom, 0, StampMember, DenseBucket).Err(); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		checkCompacted(t, c, key, calls, rng, "compacted")

		cutter := &redistest.Cutter{}
		o := *c.Options()
		o.Dialer = cutter.Dial
		cut := redis.NewClient(&o)
		t.Cleanup(func() { cut.Close() })
		s := NewStore(cut, []core.Window{x}, 0, nil, "self")
		cutter.Cut(1, "eval")
		if err := s.Remove(ctx, settled, now-2_000_000); err == nil || cutter.Cuts() != 1 {
			t.Fatalf("Remove: %v, %d replies lost; want an error for the one reply lost", err, cutter.Cuts())
		}
		for _, m := range settled {
			delete(calls, m)
		}
		checkCompacted(t, c, key, calls, rng, "after a give-back whose reply was lost")
	})
}

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{io.EOF, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{redis.ErrPoolTimeout, true},
		{redis.ErrClosed, false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("%w: %w", errTimeout, context.DeadlineExceeded), false},
		{errors.New("LOADING Redis is loading the dataset in memory"), true},
		{errors.New("ERR user_script:1: Script attempted to access nonexistent global variable"), false},
		{redis.Nil, false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
