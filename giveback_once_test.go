package throttler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// ledgerStore wraps the store a Throttler talks to and notes, per member,
// how it left Redis: removed plainly (Remove at 0, Attempt.Remove) or given
// back as written for sure (Remove at a score, Attempt.GiveBack). A
// give-back for sure of a member already removed is a bug: on a compacted
// key, the give-back finds it gone from the set and takes it out of its
// bucket, where another call is then no longer counted
// (redisstore.GiveBackScript).
type ledgerStore struct {
	store
	// late delays a round trip that gives back calls written for sure,
	// as one is now and then: whatever else removes them goes first.
	late    time.Duration
	mu      sync.Mutex
	removed map[string]bool // left plainly or given back
	twice   []string
}

func (s *ledgerStore) note(members []string, forSure bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range members {
		if forSure && s.removed[m] {
			s.twice = append(s.twice, fmt.Sprintf("%x", m))
		}
		s.removed[m] = true
	}
}

func (s *ledgerStore) Reserve(ctx context.Context, a *core.Attempt) (core.Reply, error) {
	if len(a.GiveBack) > 0 && s.late > 0 {
		time.Sleep(s.late)
	}
	s.note(a.Remove, false)
	back := make([]string, len(a.GiveBack))
	for i, e := range a.GiveBack {
		back[i] = e.Member
	}
	s.note(back, true)
	return s.store.Reserve(ctx, a)
}

func (s *ledgerStore) Remove(ctx context.Context, members []string, at int64) error {
	s.note(members, at > 0)
	return s.store.Remove(ctx, members, at)
}

// withLedger puts a ledgerStore between th and Redis, its give-backs of
// calls written for sure late by late.
func withLedger(th *Throttler, late time.Duration) *ledgerStore {
	s := &ledgerStore{store: th.st, late: late, removed: map[string]bool{}}
	th.st = s
	return s
}

// assertOnce fails t when a call was given back as written for sure
// after it was removed.
func (s *ledgerStore) assertOnce(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.twice) > 0 {
		t.Errorf("members given back for sure after they were removed: %v", s.twice)
	}
}

// A claim refused (another process filled the window unseen) and then
// given up by its caller leaves Redis once: the caller does not remove the
// members its next round trip gives back as written for sure. Removed
// twice, the give-back took, on a compacted key, a call of another
// process out of its bucket: TestInvariantCompacted's newest mode saw 21
// and 22 units in windows of 20, once in about 20 runs.
func TestRefusedClaimGivenBackOnce(t *testing.T) {
	for _, give := range []string{"deadline", "cancel"} {
		t.Run(give, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, dial dialer, key string) {
				c := dial()
				th := mustNew(t, c, key, 3, time.Hour, WithLogger(quiet))
				ledger := withLedger(th, 300*time.Millisecond)
				now, err := c.Time(context.Background()).Result()
				if err != nil {
					t.Fatal(err)
				}
				// The window is full, and th does not know it.
				for i := range 3 {
					if err := c.ZAdd(context.Background(), key, redis.Z{Score: float64(now.UnixMicro()), Member: fmt.Sprint("other", i)}).Err(); err != nil {
						t.Fatal(err)
					}
				}
				// With a deadline, the caller gives up once the refusal
				// tells it the next slot (an hour away) lies past it.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if give == "cancel" {
					// No deadline to plan against: the call waits queued
					// for its slot an hour away, and its caller gives up
					// as soon as the claim is refused.
					ctx, cancel = context.WithCancel(context.Background())
					th.hooks.onResolved = func(requeued int) {
						if requeued > 0 {
							cancel()
						}
					}
				}
				defer cancel()
				if err := th.WaitN(ctx, 2); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					t.Fatalf("WaitN in a full window: %v, want its context's end", err)
				}
				waitIdle(t, th)
				ledger.mu.Lock()
				gone := len(ledger.removed)
				ledger.mu.Unlock()
				if gone == 0 {
					t.Fatal("the refused claim was never given back: the test no longer makes one")
				}
				ledger.assertOnce(t)
			})
		})
	}
}

// compactFirst puts a store between a Throttler and Redis that, before
// the first round trip that gives calls back (plainly or as written for
// sure), runs compact, and closes done once that round trip returned.
type compactFirst struct {
	store
	compact func()
	once    sync.Once
	done    chan struct{}
}

func (s *compactFirst) Reserve(ctx context.Context, a *core.Attempt) (core.Reply, error) {
	if len(a.Remove) == 0 && len(a.GiveBack) == 0 {
		return s.store.Reserve(ctx, a)
	}
	first := false
	s.once.Do(func() { s.compact(); first = true })
	r, err := s.store.Reserve(ctx, a)
	if first {
		close(s.done)
	}
	return r, err
}

// A claim refused (the window full unseen) leaves the window whole even
// when another process's compaction moves its members into their bucket
// before the round trip that gives them back: that round trip gives them
// back as written for sure, out of the bucket, where a plain ZREM found
// nothing and left them counted, as calls that never went, until the
// bucket left the window. In seed 45216 (compactions that keep only the
// newest 8 calls), every process's refused claims did so past each
// burst, and a window's slots went unused.
func TestRefusedClaimCompactedIsGivenBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		ctx := context.Background()
		keepOne := func(o *options) error { o.compact.keep = 1; return nil } // all but the newest call compact
		th := mustNew(t, c, key, 3, time.Hour, WithLogger(quiet), withCompaction(1, 8), keepOne)
		other := mustNew(t, dial(), key, 3, time.Hour, WithLogger(quiet), withCompaction(1, 8), keepOne)
		cf := &compactFirst{store: th.st, done: make(chan struct{}), compact: func() {
			// other's first round trip trims, so it compacts before it
			// claims: th's refused claim moves into its bucket.
			if _, err := other.Allow(ctx); err != nil {
				t.Error(err)
			}
		}}
		th.st = cf
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		// The window is full, and th does not know it; its calls, newer
		// than th's claim, keep it from being the newest.
		for i := range 3 {
			if err := c.ZAdd(ctx, key, redis.Z{Score: float64(now.UnixMicro() + 100_000), Member: fmt.Sprint("other", i)}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- th.WaitN(wctx, 2) }()
		select {
		case <-cf.done:
		case err := <-errc:
			t.Fatalf("WaitN in a full window returned %v before its refused claim was given back", err)
		case <-time.After(10 * time.Second):
			t.Fatal("no round trip gave the refused claim back within 10s")
		}
		u, err := th.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Used counts the window that ends at the read: the 3 calls
		// written, once their score has come, and not the claim of 2.
		want := 0
		if !u[0].Now.Before(time.UnixMicro(now.UnixMicro() + 100_000)) {
			want = 3
		}
		if u[0].Used != want {
			t.Errorf("the window holds %d calls, want %d: the refused claim of 2 still counts", u[0].Used, want)
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitN in a full window: %v, want its context's end", err)
		}
		waitIdle(t, th)
	})
}
