package throttler

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/netfault"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// lateFirstSend puts a store between a Throttler and Redis that delays, on
// the link (proxy), the first round trip giving calls back as written for
// sure (core.Attempt.GiveBack) by late: the client's read times out first,
// the round trip is sent again, on another connection, without the delay,
// and the first request still reaches Redis, late. resent is closed once
// the round trip sent again has returned.
type lateFirstSend struct {
	store
	proxy  *netfault.Proxy
	late   time.Duration
	mu     sync.Mutex
	first  error     // the error of the delayed send
	sentAt time.Time // when it was sent
	tries  int
	resent chan struct{}
}

func (s *lateFirstSend) Reserve(ctx context.Context, a *core.Attempt) (core.Reply, error) {
	s.mu.Lock()
	tries := s.tries
	if tries > 0 || len(a.GiveBack) > 0 {
		s.tries++
	}
	s.mu.Unlock()
	switch {
	case tries == 0 && len(a.GiveBack) > 0:
		s.proxy.SetDelay(s.late, 0)
		s.mu.Lock()
		s.sentAt = time.Now()
		s.mu.Unlock()
		r, err := s.store.Reserve(ctx, a)
		s.proxy.SetDelay(0, 0) // the request is on its way: what follows goes at once
		s.mu.Lock()
		s.first = err
		s.mu.Unlock()
		return r, err
	case tries == 1:
		r, err := s.store.Reserve(ctx, a)
		close(s.resent)
		return r, err
	}
	return s.store.Reserve(ctx, a)
}

// A round trip that gives back calls written for sure (GiveBackScript),
// whose read times out, is sent again on a new connection while its first
// request is still on the network. It used to be sent again with a plain
// ZREM (core.Attempt.Resent): the ZREM took the calls out of the set, a
// compaction moved the calls of other processes into the same bucket, and
// the first request, reaching Redis late, found the calls gone from the
// set, took them for moved, and dropped them from the bucket, where they
// never were: the window counted 2 calls of 5, and admitted 3 more, 8 in a
// window of 5. The resend now leaves the give-back to the first request.
func TestGiveBackResentBeforeItsLateFirstSend(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		c := dial()
		proxy, err := netfault.Listen(c.(*redis.Client).Options().Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		const limit = 5
		keepOne := func(o *options) error { o.compact.keep = 1; return nil } // all but the newest calls compact
		slow := dial(func(o *redis.Options) {
			o.Addr = proxy.Addr()
			o.ReadTimeout, o.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
			o.MaxRetries = -1 // the library's resend only, not go-redis's
		})
		th := mustNew(t, slow, key, limit, time.Hour, WithLogger(quiet), withCompaction(1, 8), keepOne)
		other := mustNew(t, dial(), key, limit, time.Hour, WithLogger(quiet), withCompaction(1, 8), keepOne)
		const late = 700 * time.Millisecond
		ls := &lateFirstSend{store: th.st, proxy: proxy, late: late, resent: make(chan struct{})}
		th.st = ls

		now := serverMicros(t, c)
		zadd := func(at int64, members ...string) {
			for _, m := range members {
				if err := c.ZAdd(ctx, key, redis.Z{Score: float64(at), Member: m}).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Calls of other processes, unseen by th: its claim of 3 overflows,
		// is refused and given back as written for sure.
		zadd(now+100_000, "o0", "o1", "o2")
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		th.hooks.onResolved = func(requeued int) {
			if requeued > 0 {
				cancel()
			}
		}
		if err := th.WaitN(wctx, 3); !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitN in a full window: %v, want its context's end", err)
		}
		select {
		case <-ls.resent:
		case <-time.After(5 * time.Second):
			t.Fatal("the give-back was not sent again within 5s")
		}
		ls.mu.Lock()
		firstErr, sentAt := ls.first, ls.sentAt
		ls.mu.Unlock()
		t.Logf("first send: %v", firstErr)
		if firstErr == nil || !redisstore.Transient(firstErr) {
			t.Fatalf("the delayed give-back returned %v, want a transient error", firstErr)
		}
		// The resend did not give the refused claim back (see
		// core.Attempt.Resent): its members stay, and the late first send
		// gives them back.
		if rem := calls(t, c, key); len(rem) != 3+3 {
			t.Fatalf("after the resend the set holds %v, want o0..o2 and the refused claim's 3", rem)
		}
		// Two more calls of other processes fill the window (5 of 5); the
		// compaction of other's next round trip moves o0..o2 into their
		// bucket, the one th's refused calls were scored in.
		zadd(now+200_000, "p0", "p1")
		if r, err := other.Allow(ctx); err != nil || r.Allowed {
			t.Fatalf("Allow in a full window: %+v, %v", r, err)
		}
		bk := redisstore.CompactKey(key)
		n0, _ := c.HGet(ctx, bk, "n").Result()
		// The first send reaches Redis.
		time.Sleep(time.Until(sentAt.Add(late + 300*time.Millisecond)))
		waitIdle(t, other) // its refused claim has left the set
		n1, _ := c.HGet(ctx, bk, "n").Result()
		members := calls(t, c, key)
		t.Logf("bucket total before the late send %s, after %s; members %d", n0, n1, len(members))
		inBuckets, _ := strconv.Atoi(n1)
		real := 5 // o0..o2 (in the bucket) and p0, p1
		if inBuckets+countCalls(members) < real {
			t.Errorf("the window counts %d calls (%d in buckets, %d members), holds %d", inBuckets+countCalls(members), inBuckets, countCalls(members), real)
		}
		admitted := 0
		for range limit {
			r, err := other.Allow(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed {
				admitted++
			}
		}
		if real+admitted > limit {
			t.Errorf("%d calls admitted into a window holding %d of %d: %d calls in the window", admitted, real, limit, real+admitted)
		}
		waitIdle(t, th)
	})
}

// countCalls counts the members of the set that are calls (not a refused
// claim still to leave, which have none here, nor debt).
func countCalls(m map[string]int64) int {
	n := 0
	for k := range m {
		if len(k) > 0 && k[0] != 0 {
			n++
		}
	}
	return n
}

// A Throttler that does not compact its key itself, but finds another
// process's compaction there, gives back calls written for sure with
// GiveBackScript too (the key is read compacted): it must not send such
// a give-back again either (see TestGiveBackResentBeforeItsLateFirstSend),
// which it decides by how its store reads the keys, not by its own
// settings.
func TestGiveBackNotResentOnAKeyAnotherCompacts(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		keepOne := func(o *options) error { o.compact.keep = 1; return nil }
		other := mustNew(t, dial(), key, 5, time.Hour, WithLogger(quiet), withCompaction(1, 8), keepOne)
		th := mustNew(t, dial(), key, 5, time.Hour, WithLogger(quiet))
		if th.rules.Compacts() {
			t.Fatal("th compacts by its own settings; the test needs one that does not")
		}
		if mayCompact(&th.rules, th.st) {
			t.Fatal("th takes the key for compacted before any process compacted it")
		}
		// An Allow woken late for its slot goes back, refused, and counts
		// nothing (under the race detector on a loaded machine, 2 runs of
		// 40): the test needs 3 calls compacted, not 3 Allows admitted.
		for admitted, tries := 0, 0; admitted < 3; tries++ {
			r, err := other.Allow(ctx)
			if err != nil || tries == 10 {
				t.Fatalf("Allow: %+v, %v (%d admitted in %d tries)", r, err, admitted, tries)
			}
			if r.Allowed {
				admitted++
			}
		}
		waitIdle(t, other)
		// Admitted or not, its round trip read the key.
		if _, err := th.Allow(ctx); err != nil {
			t.Fatalf("Allow: %v", err)
		}
		if !mayCompact(&th.rules, th.st) {
			t.Error("th reads a key another process compacts, and would send a give-back written for sure again")
		}
	})
}
