package throttler

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// healCase runs two busy replicas on one key, makes Redis lose the window
// three times while they keep it full, and checks that the limit held across the loss:
// the replicas must notice and write their recent calls back.
func healCase(t *testing.T, dial dialer, key string, lose func()) {
	const (
		limit    = 8
		interval = 400 * time.Millisecond
	)
	var rec recorder
	// No reserve-ahead, and callers that pause between calls: admissions
	// spread over the window, and waiters depend on counts taken after the
	// loss, which is where a window lost and not healed lets too many in.
	opts := []Option{WithLogger(quiet), WithReserveAhead(0)}
	ths := []*Throttler{
		rec.watch(mustNew(t, dial(), key, limit, interval, opts...)),
		rec.watch(mustNew(t, dial(), key, limit, interval, opts...)),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, th := range ths {
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for ctx.Err() == nil {
					err := th.Wait(ctx)
					if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrRedis) {
						t.Errorf("Wait: %v", err)
						return
					}
					time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
				}
			}()
		}
	}
	lostAt := 2*limit + limit/2
	for range 3 {
		for len(rec.scores()) < lostAt {
			time.Sleep(time.Millisecond)
		}
		lose()
		lostAt = len(rec.scores()) + 2*limit + limit/2
	}
	for len(rec.scores()) < lostAt {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	heals := 0
	for _, th := range ths {
		waitIdle(t, th)
		th.mu.Lock()
		heals += int(th.stats.heals.Load())
		th.mu.Unlock()
	}
	if heals == 0 {
		t.Fatal("no replica noticed that Redis lost the window")
	}
	assertWindow(t, rec.scores(), interval+50*time.Millisecond, limit)
	t.Logf("%d admissions, the window lost 3 times; %d heals", len(rec.scores()), heals)
}

func TestHealsLostWindow(t *testing.T) {
	t.Run("miniredis flushed", func(t *testing.T) {
		mr := miniredis.RunT(t)
		healCase(t, func() redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { c.Close() })
			return c
		}, "quota", mr.FlushAll)
	})
	t.Run("redis-server restarted empty", func(t *testing.T) {
		srv := redistest.Start(t)
		healCase(t, func() redis.UniversalClient { return srv.NewClient() }, srv.Key(t, "quota"), func() { srv.Restart(t) })
	})
}

// A local clock stepped ahead by more than the key's TTL must not make a
// window Redis just lost look like a key that expired on its own: how long
// ago this process last saw the marker is measured on the server's clock
// (simulation seed 406, where a replica stepped 3.3s ahead of a 2.5s TTL
// saw a flushed window as expired and admitted a call over the limit).
func TestClockStepDoesNotHideLostWindow(t *testing.T) {
	mr := miniredis.RunT(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var elapsed, step atomic.Int64
	server := func() time.Time { return base.Add(time.Duration(elapsed.Load())) }
	local := func() time.Time { return server().Add(time.Duration(step.Load())) }
	mr.SetTime(base)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	ctx := context.Background()
	th := mustNew(t, c, "k", 2, time.Second, WithClock(local), WithBuffer(0), WithReserveAhead(0))
	ttl := th.rules.TTL()

	for i := range 2 {
		if r, err := th.Allow(ctx); err != nil || !r.Allowed {
			t.Fatalf("call %d: %+v, %v", i, r, err)
		}
	}
	mr.FlushAll() // the window, full, is lost
	elapsed.Add(int64(100 * time.Millisecond))
	mr.SetTime(server())
	step.Store(int64(ttl + time.Second))

	// Within the lost window's second, nothing may be admitted: the first
	// round trip sees the step (its counts prove nothing) and the missing
	// marker; the loss must be noticed, not the marker quietly rewritten.
	for i := range 3 {
		if r, err := th.Allow(ctx); err != nil || r.Allowed {
			t.Fatalf("call %d after the loss, 100ms into the window: %+v, %v; want refused", i, r, err)
		}
	}
	if s := th.Stats(); s.Heals != 1 {
		t.Fatalf("Heals = %d, want 1", s.Heals)
	}
}

// A window Redis lost is noticed while any limit still counts the calls it
// held, not only the first: with a short first limit and a long second
// one, a flush after the first limit's calls stopped counting still loses
// the second's (simulation seed 2370: 28 calls in a window of 21).
func TestLostLongerLimitIsNoticed(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		long := "{" + key + "}:long"
		short := "{" + key + "}:short"
		th := mustNew(t, c, short, 10, 10*time.Millisecond, WithLogger(quiet), WithBuffer(0),
			WithReserveAhead(0), WithLimit(long, 2, time.Hour))
		ctx := context.Background()
		for i := range 2 {
			if r, err := th.Allow(ctx); err != nil || !r.Allowed {
				t.Fatalf("call %d: %+v, %v", i, r, err)
			}
		}
		// The short limit's calls stop counting, and so would its key had
		// it a TTL of its own (10ms + 2s); the hour's still count.
		time.Sleep(2100 * time.Millisecond)
		if err := c.Del(ctx, short, long).Err(); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if r, err := th.Allow(ctx); err != nil || r.Allowed {
				t.Fatalf("call %d after the hour's window was lost: %+v, %v; want refused", i, r, err)
			}
		}
		if s := th.Stats(); s.Heals != 1 {
			t.Fatalf("Heals = %d, want 1", s.Heals)
		}
		waitIdle(t, th)
	})
}

// TestProbeGivenBackInFlight: a probe given back while its round trip was
// in flight cannot tell a loss; the round trips after it, whose own calls
// may have been written after the loss, also probe a call written before
// it, and find the loss. (Seed 174 of the simulator: a flush whose marker
// a new process wrote again, and a probe settled away in flight, let every
// process admit a window's worth on an empty key.)
func TestProbeGivenBackInFlight(t *testing.T) {
	const ttl = int64(time.Hour / time.Microsecond)
	h := health{lastSeen: 1, journal: core.Journal{Cap: 100, W: ttl}}
	var o owed
	h.journal.Add(10, []string{"a", "b"}) // written before the loss
	round := func(gone ...bool) (a core.Attempt, lost bool) {
		h.lossChecks(&a, 20, &o)
		var r core.Reply
		copy(r.Gone[:], gone)
		return a, h.noticeLoss(&a, r, 20, ttl, &o)
	}

	// The loss: b is gone, but was given back in flight.
	var first core.Attempt
	h.lossChecks(&first, 20, &o)
	if first.Loss.Probes[0].Member != "b" || first.Loss.Probes[1].Member != "" {
		t.Fatalf("first probes %+v, want b alone", first.Loss.Probes)
	}
	h.forget([]string{"b"}, &testHooks{})
	if h.noticeLoss(&first, core.Reply{Gone: [2]bool{true}}, 20, ttl, &o) {
		t.Fatal("a probe given back in flight counted as a loss")
	}
	h.journal.Add(15, []string{"c"}) // the round trip's own call: written after the loss

	next, lost := round(false, true)
	if next.Loss.Probes[0].Member != "c" || next.Loss.Probes[1].Member != "a" {
		t.Fatalf("next probes %+v, want c and a (the newest added before the check that could not tell)", next.Loss.Probes)
	}
	if !lost {
		t.Fatal("a gone and still held: the loss went unnoticed")
	}

	// Told (every probe found): back to the newest alone.
	h = health{lastSeen: 1, journal: core.Journal{Cap: 100, W: ttl}}
	h.journal.Add(10, []string{"a", "b"})
	h.lossChecks(&first, 20, &o)
	h.forget([]string{"b"}, &testHooks{})
	h.noticeLoss(&first, core.Reply{Gone: [2]bool{true}}, 20, ttl, &o)
	h.journal.Add(15, []string{"c"})
	if _, lost := round(false, false); lost {
		t.Fatal("a loss reported with every probe found")
	}
	if after, _ := round(); after.Loss.Probes[1].Member != "" {
		t.Fatalf("after a round trip that told: probes %+v, want the newest alone", after.Loss.Probes)
	}

	// Every call written before it given back: nothing left to lose.
	h = health{lastSeen: 1, journal: core.Journal{Cap: 100, W: ttl}}
	h.journal.Add(10, []string{"b"})
	first = core.Attempt{}
	h.lossChecks(&first, 20, &o)
	h.forget([]string{"b"}, &testHooks{})
	h.noticeLoss(&first, core.Reply{Gone: [2]bool{true}}, 20, ttl, &o)
	h.journal.Add(15, []string{"c"})
	if after, _ := round(); after.Loss.Probes[1].Member != "" || h.unsure != 0 {
		t.Fatalf("with nothing written before left: probes %+v, unsure %d", after.Loss.Probes, h.unsure)
	}
}
