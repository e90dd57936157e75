package throttler

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// withCompaction compacts every window whose limit is at least from, in n
// buckets: tests compact small windows.
func withCompaction(from, n int) Option {
	return func(o *options) error {
		o.compact.from, o.compact.buckets = from, n
		return nil
	}
}

// TestInvariantCompacted: replicas sharing a compacted window (its calls
// moved into buckets while the run goes on) never admit more than the limit
// in any window, whether every replica compacts or only some (a rollout
// across the threshold), or compactions move all but the newest few calls,
// with calls given up on the way. The buckets are
// there, and hold calls, once the run is over.
func TestInvariantCompacted(t *testing.T) {
	redistest.Long(t)
	for _, mode := range []string{"all", "mixed", "newest"} {
		t.Run(mode, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, dial dialer, key string) {
				const (
					limit      = 20
					interval   = 150 * time.Millisecond
					replicas   = 3
					goroutines = 5
					rounds     = 12
				)
				var rec recorder
				ths := make([]*Throttler, replicas)
				ledgers := make([]*ledgerStore, replicas)
				for i := range ths {
					from, keep := 1, core.CompactKeep
					if mode == "mixed" && i == 0 {
						from = 0 // a member per call
					}
					if mode == "newest" {
						keep = 3 // all but the newest 3 calls compact, young or not
					}
					ths[i] = rec.watch(mustNew(t, dial(), key, limit, interval, withCompaction(from, 8), func(o *options) error { o.compact.keep = keep; return nil }))
					ledgers[i] = withLedger(ths[i], 0)
				}
				var wg sync.WaitGroup
				for r := range replicas {
					for g := range goroutines {
						wg.Add(1)
						go func() {
							defer wg.Done()
							rng := rand.New(rand.NewPCG(uint64(r), uint64(g)))
							for range rounds {
								ctx, cancel := context.Background(), context.CancelFunc(func() {})
								if rng.IntN(4) == 0 {
									ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(80))*time.Millisecond)
								}
								err := ths[r].WaitN(ctx, 1+rng.IntN(2))
								cancel()
								if err != nil && !errors.Is(err, context.DeadlineExceeded) {
									t.Errorf("WaitN: %v", err)
								}
							}
						}()
					}
				}
				wg.Wait()
				for _, th := range ths {
					waitIdle(t, th)
				}
				scores := rec.scores()
				for _, l := range ledgers {
					l.assertOnce(t)
				}
				rec.assertWindow(t, interval+50*time.Millisecond, limit)
				c := dial()
				h, err := c.HGetAll(context.Background(), redisstore.CompactKey(key)).Result()
				if err != nil {
					t.Fatal(err)
				}
				n, _ := strconv.Atoi(h["n"])
				if n == 0 {
					t.Fatalf("no call was compacted (buckets %v) in a run of %d admitted units", h, len(scores))
				}
				t.Logf("%d units admitted, %d compacted, %d still members", len(scores), n, len(calls(t, c, key)))
			})
		})
	}
}

// WithCompactFrom chooses which windows compact, as Usage states: by
// default a limit of 5,000 compacts and one below does not; 0 keeps a
// member per call whatever the limit; a negative limit is an error.
func TestWithCompactFrom(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer c.Close()
	if _, err := New(c, "k", 10, time.Second, WithCompactFrom(-1)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("WithCompactFrom(-1): %v, want ErrInvalidArgument", err)
	}
	for _, tc := range []struct {
		limit   int
		opts    []Option
		compact bool
	}{
		{4_999, nil, false},
		{5_000, nil, true},
		{1_000_000, []Option{WithCompactFrom(0)}, false},
		{100, []Option{WithCompactFrom(100)}, true},
	} {
		th := mustNew(t, c, "k"+strconv.Itoa(tc.limit), tc.limit, time.Minute, tc.opts...)
		u, err := th.Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// A minute plus the 50ms buffer in 1,024 buckets: 58,643µs.
		if got, want := u[0].Bucket > 0, tc.compact; got != want || (got && u[0].Bucket != 58_643*time.Microsecond) {
			t.Errorf("limit %d (%d options): Usage.Bucket %s, want compacted %v", tc.limit, len(tc.opts), u[0].Bucket, want)
		}
	}
}

// A surplus settled after its call was compacted frees its slots: the
// settle takes it out of its bucket (the permit's members were written
// for sure), so the room is there again within the same window.
func TestSettleAfterCompaction(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		c := dial()
		// A window of 2.05s: calls compact after 512ms.
		th := mustNew(t, c, key, 10, 2*time.Second, withCompaction(1, 64))
		p, err := th.Acquire(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(700 * time.Millisecond)
		// A refused attempt's round trip trims, so compacts.
		if r, err := th.Allow(ctx); err != nil || r.Allowed {
			t.Fatalf("Allow with the window full: %+v, %v", r, err)
		}
		if n, err := c.HGet(ctx, redisstore.CompactKey(key), "n").Int(); err != nil || n != 10 {
			t.Fatalf("the permit's calls compacted: %d (%v), want 10", n, err)
		}
		if err := p.Settle(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if r, err := th.AllowN(ctx, 9); err != nil || !r.Allowed {
			t.Fatalf("AllowN(9) after settling 1 of 10: %+v, %v; the surplus should have left its bucket", r, err)
		}
		if r, err := th.Allow(ctx); err != nil || r.Allowed {
			t.Fatalf("Allow with the window full again: %+v, %v", r, err)
		}
	})
}
