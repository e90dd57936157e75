package throttler

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
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
	redistest.Long(t)
	t.Run("miniredis flushed", func(t *testing.T) {
		mr := miniredis.RunT(t)
		healCase(t, miniDialer(t, mr), "quota", mr.FlushAll)
	})
	t.Run("redis-server restarted empty", func(t *testing.T) {
		srv := redistest.Start(t)
		healCase(t, serverDialer(srv), srv.Key(t, "quota"), func() { srv.Restart(t) })
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
	if s := th.Stats(); s.Redis.Heals != 1 {
		t.Fatalf("Heals = %d, want 1", s.Redis.Heals)
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
		if s := th.Stats(); s.Redis.Heals != 1 {
			t.Fatalf("Heals = %d, want 1", s.Redis.Heals)
		}
		waitIdle(t, th)
	})
}

// probeWorld drives a process's loss checks (health) against a model of
// the key's members, round trip by round trip.
type probeWorld struct {
	t     *testing.T
	h     health
	o     owed
	redis map[string]bool // the members the key holds
}

func newProbeWorld(t *testing.T) *probeWorld {
	const ttl = int64(time.Hour / time.Microsecond)
	return &probeWorld{t: t, h: health{lastSeen: 1, journal: core.Journal{Cap: 100, W: ttl}}, redis: map[string]bool{}}
}

// round makes one round trip: its probes are planned, the members
// givenBack are given back while it is in flight, the key answers, and the
// calls it writes are journaled (unless it saw a loss). It returns the
// probes it sent and whether it saw a loss.
func (w *probeWorld) round(givenBack []string, writes ...string) ([2]string, bool) {
	const ttl = int64(time.Hour / time.Microsecond)
	var a core.Attempt
	w.h.lossChecks(&a, 20, &w.o)
	for _, m := range givenBack {
		w.h.forget([]string{m}, &testHooks{})
		delete(w.redis, m)
	}
	var r core.Reply
	for i, p := range a.Loss.Probes {
		r.Gone[i] = p.Member != "" && !w.redis[p.Member]
	}
	lost := w.h.noticeLoss(&a, r, 20, ttl, &w.o)
	if !lost {
		for _, m := range writes {
			w.redis[m] = true
		}
		w.h.journal.Add(15, writes)
	}
	return [2]string{a.Loss.Probes[0].Member, a.Loss.Probes[1].Member}, lost
}

// lose makes the key lose members (a flush, or a failover to a copy
// without them).
func (w *probeWorld) lose(members ...string) {
	for _, m := range members {
		delete(w.redis, m)
	}
}

func (w *probeWorld) want(step string, got [2]string, lost bool, probes [2]string, wantLost bool) {
	w.t.Helper()
	if got != probes || lost != wantLost {
		w.t.Fatalf("%s: probes %q, loss seen %v; want %q, %v", step, got, lost, probes, wantLost)
	}
}

// TestProbeGivenBackInFlight: a probe given back while its round trip was
// in flight cannot tell a loss; the round trips after it, whose own calls
// may have been written after the loss, also probe, in turn, a call
// written before each round trip that could not tell, and find the loss.
// (Seed 174 of the simulator: a flush whose marker a new process wrote
// again, and a probe settled away in flight, let every process admit a
// window's worth on an empty key.)
func TestProbeGivenBackInFlight(t *testing.T) {
	t.Run("flush", func(t *testing.T) {
		w := newProbeWorld(t)
		w.round(nil, "a", "b")
		w.lose("a", "b")
		probes, lost := w.round([]string{"b"}, "c") // c: written after the loss
		w.want("b given back in flight", probes, lost, [2]string{"b", ""}, false)
		probes, lost = w.round(nil)
		w.want("next", probes, lost, [2]string{"c", "a"}, true)
	})
	t.Run("told", func(t *testing.T) {
		w := newProbeWorld(t)
		w.round(nil, "a", "b")
		w.round([]string{"b"}, "c")
		probes, lost := w.round(nil)
		w.want("after it", probes, lost, [2]string{"c", "a"}, false)
		probes, lost = w.round(nil)
		w.want("once told", probes, lost, [2]string{"c", ""}, false)
	})
	t.Run("nothing left", func(t *testing.T) {
		w := newProbeWorld(t)
		w.round(nil, "b")
		w.round([]string{"b"}, "c")
		probes, lost := w.round(nil)
		w.want("every call before it given back", probes, lost, [2]string{"c", ""}, false)
		if len(w.h.unsure) != 0 {
			t.Fatalf("checks owed: %v", w.h.unsure)
		}
	})
	// The round trip after one that could not tell cannot tell either;
	// its older probe is found: the calls of the round trip between are
	// still owed a check.
	t.Run("two in a row", func(t *testing.T) {
		w := newProbeWorld(t)
		w.round(nil, "e1", "e2")
		w.round([]string{"e2"}, "f1", "f2")
		w.lose("f1", "f2") // a failover to a copy with e1, without f
		probes, lost := w.round([]string{"f2"}, "g")
		w.want("f2 given back in flight", probes, lost, [2]string{"f2", "e1"}, false)
		probes, lost = w.round(nil)
		w.want("next", probes, lost, [2]string{"g", "f1"}, true)
	})
	// Both probes of the round trip after the loss are given back in
	// flight: each round trip owed a check gets one, in turn.
	t.Run("both untold", func(t *testing.T) {
		w := newProbeWorld(t)
		w.round(nil, "a1", "a2", "a3")
		w.round([]string{"a3"}, "b1", "b2", "b3")
		w.lose("b1", "b2", "b3") // a failover to a copy with a, without b
		probes, lost := w.round([]string{"b3", "a2"}, "c")
		w.want("b3 and a2 given back in flight", probes, lost, [2]string{"b3", "a2"}, false)
		probes, lost = w.round(nil, "d")
		w.want("a1, before the first owed", probes, lost, [2]string{"c", "a1"}, false)
		probes, lost = w.round(nil)
		w.want("b2, before the second", probes, lost, [2]string{"d", "b2"}, true)
	})
}

// A local clock stepped ahead must not trim the probes away: the journal
// keeps calls by the server's time a reply last read, so the round trip
// planned with the stepped estimate still probes the newest call, and
// finds it lost. A probe that left the window by the time its round trip
// reached the server may have been trimmed there, and tells nothing.
// (Seed 547 of the simulator: a clock stepped 120ms ahead, then a failover
// to a copy without the process's calls scored ahead; the journal, trimmed
// by the stepped estimate, held no probe, and the process admitted a
// window's worth on the copy.)
func TestClockStepKeepsProbes(t *testing.T) {
	const w, ttl = 100, int64(time.Hour / time.Microsecond)
	plan := func(h *health, serverNow int64) (core.Attempt, owed) {
		var a core.Attempt
		var o owed
		h.lossChecks(&a, serverNow, &o)
		return a, o
	}
	t.Run("stepped ahead", func(t *testing.T) {
		h := health{lastSeen: 1, journal: core.Journal{Cap: 100, W: w}}
		a, o := plan(&h, 20)
		h.noticeLoss(&a, core.Reply{}, 20, ttl, &o)
		h.journal.Add(50, []string{"a"}) // scored ahead of the server's 20
		a, o = plan(&h, 20+10*w)         // the local clock jumps
		if a.Loss.Probes[0].Member != "a" {
			t.Fatalf("probe after a step ahead: %q, want a", a.Loss.Probes[0].Member)
		}
		r := core.Reply{RiderReply: core.RiderReply{Gone: [2]bool{true}}} // a failover to a copy without it
		if !h.noticeLoss(&a, r, 40, ttl, &o) {
			t.Fatal("the lost probe was not noticed")
		}
	})
	t.Run("left the window", func(t *testing.T) {
		h := health{lastSeen: 1, journal: core.Journal{Cap: 100, W: w}}
		h.journal.Add(15, []string{"a"})
		a, o := plan(&h, 20)
		if a.Loss.Probes[0].Member != "a" {
			t.Fatalf("probe: %q, want a", a.Loss.Probes[0].Member)
		}
		r := core.Reply{RiderReply: core.RiderReply{Gone: [2]bool{true}}} // trimmed by the server at 15+w
		if h.noticeLoss(&a, r, 15+w, ttl, &o) {
			t.Fatal("a probe trimmed from the window was taken for a loss")
		}
	})
}

// A failover to a copy that missed this process's calls is noticed in a
// compacted window too, where the probe cannot tell: once a compaction
// has moved the copy's calls into their bucket, a probe missing from the
// set but scored in that bucket may have been moved there as well. The
// tally tells (simulation seed 20155: the three calls the copy kept of a
// slot's eight vouched for the five lost, and 13 went in a window of 8).
func TestFailoverBehindIntoCompactedBucketIsNoticed(t *testing.T) {
	mr := miniredis.RunT(t)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var elapsed atomic.Int64
	now := func() time.Time { return base.Add(time.Duration(elapsed.Load())) }
	mr.SetTime(base)
	ctx := context.Background()
	opts := []Option{WithLogger(quiet), WithClock(now), WithBuffer(0), WithReserveAhead(0), withCompaction(1, 4)}
	newReplica := func() *Throttler {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { c.Close() })
		return mustNew(t, c, "k", 4, time.Second, opts...)
	}
	a, b := newReplica(), newReplica()
	allow := func(th *Throttler, want bool) {
		t.Helper()
		if r, err := th.Allow(ctx); err != nil || r.Allowed != want {
			t.Fatalf("Allow: %+v, %v; want allowed %v", r, err, want)
		}
	}
	allow(b, true)
	copyBehind := snapshotStore(t, mr)
	for range 3 {
		allow(a, true) // the window is full
	}
	restoreStore(mr, copyBehind) // the failover: a's three calls are lost
	elapsed.Add(int64(600 * time.Millisecond))
	mr.SetTime(now())
	// a's round trip trims, so compacts: b's call, older than the window's
	// age, moves into the bucket a's calls were scored in.
	allow(a, false)
	if s := a.Stats(); s.Redis.Heals != 1 {
		t.Fatalf("Heals = %d, want 1", s.Redis.Heals)
	}
	if n := mr.HGet(redisstore.CompactKey("k"), "n"); n != "1" {
		t.Fatalf("compacted calls: %q, want 1 (b's)", n)
	}
}

// storeCopy is a copy of a miniredis's sorted sets and hashes, as a
// replica that last synced then holds them.
type storeCopy map[string]struct {
	members map[string]float64
	fields  map[string]string
	ttl     time.Duration
}

func snapshotStore(t *testing.T, mr *miniredis.Miniredis) storeCopy {
	t.Helper()
	c := storeCopy{}
	for _, k := range mr.Keys() {
		v := c[k]
		switch mr.Type(k) {
		case "zset":
			ms, err := mr.SortedSet(k)
			if err != nil {
				t.Fatal(err)
			}
			v.members = maps.Clone(ms)
		case "hash":
			v.fields = map[string]string{}
			fs, err := mr.HKeys(k)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fs {
				v.fields[f] = mr.HGet(k, f)
			}
		}
		v.ttl = mr.TTL(k)
		c[k] = v
	}
	return c
}

// restoreStore makes mr hold what c holds, and nothing else: a failover
// to the replica c was copied from.
func restoreStore(mr *miniredis.Miniredis, c storeCopy) {
	mr.FlushAll()
	for k, v := range c {
		for m, s := range v.members {
			mr.ZAdd(k, s, m)
		}
		for f, val := range v.fields {
			mr.HSet(k, f, val)
		}
		if v.ttl > 0 {
			mr.SetTTL(k, v.ttl)
		}
	}
}
