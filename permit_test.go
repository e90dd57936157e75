package throttler

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// allowed counts how many single calls Allow admits now, up to max.
func allowed(t *testing.T, th *Throttler, max int) int {
	t.Helper()
	n := 0
	for range max {
		res, err := th.Allow(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !res.Allowed {
			break
		}
		n++
	}
	return n
}

// A surplus goes back at once, for every replica; an excess is debt that
// later calls count, in every limit's key; only the first Settle counts.
func TestSettle(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		other := dial()
		first, second := "{"+key+"}:min", "{"+key+"}:hour"
		th := mustNew(t, dial(), first, 10, time.Minute, WithLogger(quiet), WithLimit(second, 20, time.Hour))
		peer := mustNew(t, other, first, 10, time.Minute, WithLogger(quiet), WithLimit(second, 20, time.Hour))

		p, err := th.Acquire(ctx, 8)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Settle(ctx, 3); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{first, second} {
			if n := len(keyMembers(t, other, k)); n != 3 {
				t.Fatalf("%s holds %d members after settling 8 down to 3, want 3", k, n)
			}
		}
		if err := p.Settle(ctx, 8); err != nil || len(keyMembers(t, other, first)) != 3 {
			t.Fatalf("a second Settle changed the permit (err %v)", err)
		}
		// The surplus is the other replica's to use at once.
		if n := allowed(t, peer, 10); n != 7 {
			t.Fatalf("the other replica got %d calls after the surplus went back, want 7", n)
		}
	})
}

// Debt: a call that cost more than estimated counts its excess at its
// admission time; later calls wait until it slides out.
func TestSettleDebt(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		c := dial()
		th := mustNew(t, c, key, 10, time.Hour, WithLogger(quiet))
		p, err := th.Acquire(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Settle(ctx, 6); err != nil {
			t.Fatal(err)
		}
		if n := len(keyMembers(t, c, key)); n != 6 {
			t.Fatalf("the window holds %d members after settling 2 up to 6, want 6", n)
		}
		if n := allowed(t, th, 10); n != 4 {
			t.Fatalf("after a debt of 4, %d more calls fit in a window of 10, want 4", n)
		}
		if s := th.Stats(); s.Costs.Settled != 1 || s.Costs.Debt != 4 || s.Costs.Returned != 0 {
			t.Fatalf("Stats after one permit settled 2 -> 6: %+v, want Settled 1, Debt 4", s)
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := th.Acquire(short, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire in a window full with debt: %v, want the deadline error", err)
		}
	})
}

// Settle is not cut short by its context: a caller whose context ended
// with the call still settles it, a surplus and a debt alike, for every
// replica.
func TestSettleAfterContextEnded(t *testing.T) {
	_, c := miniClient(t)
	th := mustNew(t, c, "k", 10, time.Hour, WithLogger(quiet))
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct{ estimate, actual int }{{3, 1}, {1, 3}} {
		p, err := th.Acquire(context.Background(), tc.estimate)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Settle(ended, tc.actual); err != nil {
			t.Fatalf("Settle(%d) of an estimate of %d with its context ended: %v", tc.actual, tc.estimate, err)
		}
	}
	if n := len(keyMembers(t, c, "k")); n != 1+3 {
		t.Fatalf("the window holds %d units, want 4: 3 settled to 1, 1 to 3", n)
	}
	waitIdle(t, th)
}

// An actual above the limit fills every window holding the admission
// time: no call is admitted until the admission time slides out of the
// window, and calls are once it has. An excess far above the limit (a bad
// reading of a response) is written as the limit: the same block, without
// a member per unit.
func TestSettleAboveTheLimit(t *testing.T) {
	_, c := miniClient(t)
	const interval = 300 * time.Millisecond
	th := mustNew(t, c, "k", 10, interval, WithLogger(quiet))
	ctx := context.Background()
	p, err := th.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Settle(ctx, 1<<40); err != nil { // a bad reading: as much as the limit is written
		t.Fatal(err)
	}
	if n, debt := len(keyMembers(t, c, "k")), th.Stats().Costs.Debt; n != 11 || debt != 10 {
		t.Fatalf("the window holds %d units and Stats count %d of debt after settling 1 up to 2^40, want 11 and 10 (the limit)", n, debt)
	}
	if n := allowed(t, th, 10); n != 0 {
		t.Fatalf("%d calls admitted in a window a debt of the limit fills, want none", n)
	}
	time.Sleep(time.Until(p.At().Add(interval + th.rules.Buffer + 50*time.Millisecond)))
	if n := allowed(t, th, 10); n != 10 {
		t.Fatalf("%d calls admitted once the debt slid out of the window, want 10", n)
	}
	waitIdle(t, th)
}

func TestSettleRejectsBadInput(t *testing.T) {
	th := miniThrottler(t, 5, time.Second)
	ctx := context.Background()
	if _, err := th.Acquire(ctx, 6); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Acquire above the limit: %v, want ErrInvalidArgument", err)
	}
	p, err := th.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Settle(ctx, -1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Settle(-1): %v, want ErrInvalidArgument", err)
	}
	// The bad call did not settle the permit.
	if err := p.Settle(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, th)
}

// A Settle whose write fails returns ErrRedis; the surplus is removed, and
// the debt added, by the next round trip that works.
func TestSettleWhenRedisFails(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		c := dial()
		th := mustNew(t, c, key, 10, time.Hour, WithLogger(quiet))
		fs := withFaults(th)
		p, err := th.Acquire(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		fs.failRemove.Store(1)
		if err := p.Settle(ctx, 1); !errors.Is(err, ErrRedis) {
			t.Fatalf("Settle with its removal failing: %v, want ErrRedis", err)
		}
		waitIdle(t, th)
		if n := len(keyMembers(t, c, key)); n != 1 {
			t.Fatalf("once idle the window holds %d members, want the 1 settled", n)
		}
	})
}

// The guarantee with settle, under concurrency, on both backends: in every
// window, the calls' settled costs exceed the limit by at most what was
// under-estimated there; that is, what each permit held within its
// estimate, min(actual, estimate), sums to at most the limit.
func TestSettleInvariant(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const (
			limit    = 20
			interval = 300 * time.Millisecond
		)
		type settled struct {
			score            int64
			estimate, actual int
		}
		var (
			mu   sync.Mutex
			done []settled
		)
		ths := []*Throttler{
			mustNew(t, dial(), key, limit, interval, WithLogger(quiet)),
			mustNew(t, dial(), key, limit, interval, WithLogger(quiet)),
		}
		var wg sync.WaitGroup
		for i, th := range ths {
			for g := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
					for range 12 {
						est := 1 + rng.IntN(5)
						p, err := th.Acquire(context.Background(), est)
						if err != nil {
							t.Error(err)
							return
						}
						actual := rng.IntN(9)
						if err := p.Settle(context.Background(), actual); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						done = append(done, settled{p.score, est, actual})
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		for _, th := range ths {
			waitIdle(t, th)
		}
		w := core.WindowMicros(interval + ths[0].rules.Buffer)
		for _, a := range done {
			held := 0
			for _, b := range done {
				if b.score >= a.score && b.score < a.score+w {
					held += min(b.estimate, b.actual)
				}
			}
			if held > limit {
				t.Fatalf("the window from %d holds %d units within their estimates, more than the limit %d", a.score, held, limit)
			}
		}
	})
}

// DoCost settles with the cost fn reports, a failed call's included, and
// does not call fn when the reservation fails.
func TestDoCost(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	th := mustNew(t, c, "k", 10, time.Hour, WithLogger(quiet))
	ctx := context.Background()
	if err := th.DoCost(ctx, 5, func(context.Context) (int, error) { return 2, nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("the API failed")
	if err := th.DoCost(ctx, 3, func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("DoCost with fn failing: %v, want fn's error", err)
	}
	if n := len(keyMembers(t, c, "k")); n != 2 {
		t.Fatalf("the window holds %d units, want 2 (5 settled to 2, 3 to 0)", n)
	}
	called := false
	if err := th.DoCost(ctx, 11, func(context.Context) (int, error) { called = true; return 0, nil }); !errors.Is(err, ErrInvalidArgument) || called {
		t.Fatalf("DoCost above the limit: %v (fn called: %v), want ErrInvalidArgument without a call", err, called)
	}
	waitIdle(t, th)
}

// A probe given back while the round trip that looks it up is on its way
// (here a settled surplus) is gone because this process removed it: no
// loss, no heal (simulation seed 124 healed twice with nothing lost).
func TestProbeGivenBackMidFlightIsNoLoss(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		th := mustNew(t, dial(), key, 10, time.Hour, WithLogger(quiet))
		fs := withFaults(th)
		p, err := th.Acquire(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		settle := func() {
			if err := p.Settle(ctx, 0); err != nil {
				t.Error(err)
			}
		}
		fs.before.Store(&settle)
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := th.Wait(short); err != nil {
			t.Fatalf("Wait after a probe was given back mid-flight: %v", err)
		}
		if s := th.Stats(); s.Redis.Heals != 0 || s.Pauses != 0 {
			t.Fatalf("a probe this process gave back was taken for a lost window: %+v", s)
		}
		waitIdle(t, th)
	})
}

func TestPermitAtIsTheServerTimeCounted(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	th, err := New(rdb, "permit-at", 10, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p, err := th.Acquire(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	members, err := rdb.ZRangeWithScores(context.Background(), "permit-at", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, z := range members {
		if z.Score > 0 {
			got = append(got, int64(z.Score))
		}
	}
	if len(got) != 1 || got[0] != p.At().UnixMicro() {
		t.Fatalf("Permit.At() = %d µs, members' scores %v: want the one score", p.At().UnixMicro(), got)
	}
}
