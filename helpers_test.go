package throttler

import (
	"context"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) { os.Exit(checkMoves(code)) }))
}

// dialer returns a new, separate client to the backend under test, as a
// separate replica would have; configure functions may adjust its options
// first (a fault-injecting Dialer, a proxy's address).
type dialer func(configure ...func(*redis.Options)) redis.UniversalClient

// eachBackend runs f against miniredis and against a real redis-server (which
// redistest starts, or REDIS_URL names; skipped only when neither exists and
// THROTTLER_REQUIRE_REDIS is unset). Every client dial hands out runs its
// scripts under a key guard (see guardedBackends): the test fails when one
// touches a key it did not declare in KEYS.
func eachBackend(t *testing.T, f func(t *testing.T, dial dialer, key string)) {
	t.Helper()
	guardedBackends(t, func(t *testing.T, dial dialer, key string, _ *redistest.KeyGuard) { f(t, dial, key) })
}

// guardedBackends runs f as eachBackend does, with the key guard of the
// backend's clients (redistest.KeyGuard, which knows redisstore.Scripts):
// every EVAL and EVALSHA runs a copy of its script that fails on a key not
// in KEYS, as Dragonfly and some Redis Cluster proxies would. The test
// fails, once its cleanups have run, when the guard recorded a violation.
func guardedBackends(t *testing.T, f func(t *testing.T, dial dialer, key string, g *redistest.KeyGuard)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		dial, g := keyGuarded(t, miniDialer(t, miniredis.RunT(t)))
		f(t, dial, "quota", g)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		dial, g := keyGuarded(t, serverDialer(srv))
		f(t, dial, srv.Key(t, "quota"), g)
	})
}

// keyGuarded returns dial with one new key guard on every client it hands
// out, and the guard; t fails, after the cleanups registered later, when
// the guard recorded a violation.
func keyGuarded(t *testing.T, dial dialer) (dialer, *redistest.KeyGuard) {
	g := redistest.NewKeyGuard(redisstore.Scripts())
	t.Cleanup(func() {
		if err := g.Err(); err != nil {
			t.Errorf("a script touched what it did not declare in KEYS: %v", err)
		}
	})
	return func(configure ...func(*redis.Options)) redis.UniversalClient {
		c := dial(configure...)
		c.AddHook(g)
		return c
	}, g
}

// serverDialer is the dialer of srv: its clients close when the test that
// started it ends.
func serverDialer(srv *redistest.Server) dialer {
	return func(configure ...func(*redis.Options)) redis.UniversalClient { return srv.NewClient(configure...) }
}

// miniDialer is the dialer of mr: its clients close when t ends.
func miniDialer(t *testing.T, mr *miniredis.Miniredis) dialer {
	return func(configure ...func(*redis.Options)) redis.UniversalClient {
		o := &redis.Options{Addr: mr.Addr()}
		for _, adjust := range configure {
			adjust(o)
		}
		c := redis.NewClient(o)
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// lateWaker returns a Throttler on key, watched by rec, whose local clock
// steps d ahead right after each admission for which late(n) holds (n
// counts its admissions from 1): that call then finds itself woken d after
// its slot, as an overloaded machine's late wake-up looks.
func lateWaker(t *testing.T, c redis.UniversalClient, key string, limit int, interval time.Duration, rec *recorder, d time.Duration, late func(n int64) bool) *Throttler {
	t.Helper()
	var step, n atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(step.Load())) }
	th := rec.watch(mustNew(t, c, key, limit, interval, WithClock(clock), WithBuffer(50*time.Millisecond)))
	inner := th.hooks.onAdmit
	th.hooks.onAdmit = func(s int64, m []string) {
		inner(s, m)
		if late(n.Add(1)) {
			step.Add(int64(d))
		}
	}
	return th
}

// admission is one admitted call as the Throttler saw it.
type admission struct {
	score   int64 // server time, microseconds
	members []string
	at      time.Time // when it was admitted, or given back (see recorder.gone)
}

// recorder collects admissions from any number of Throttlers, and the
// members given back (gone).
type recorder struct {
	mu   sync.Mutex
	list []admission
	gone []admission
}

func (r *recorder) watch(th *Throttler) *Throttler {
	th.hooks.onAdmit = func(score int64, members []string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.list = append(r.list, admission{score: score, members: append([]string(nil), members...), at: time.Now()})
	}
	th.hooks.onRelease = func(members []string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.gone = append(r.gone, admission{members: append([]string(nil), members...), at: time.Now()})
		r.list = slices.DeleteFunc(r.list, func(a admission) bool {
			return len(a.members) > 0 && slices.Contains(members, a.members[0])
		})
	}
	return th
}

// scores returns one score per admitted call (a weighted call counts n times).
func (r *recorder) scores() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []int64
	for _, a := range r.list {
		for range a.members {
			s = append(s, a.score)
		}
	}
	return s
}

func (r *recorder) members() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]bool{}
	for _, a := range r.list {
		for _, x := range a.members {
			m[x] = true
		}
	}
	return m
}

// assertWindow is assertWindow over r's admissions that logs, when it
// fails, the admissions of the fullest window and every give-back, each
// with its members and when it came: which process admitted what after
// what, to attribute a window over the limit (TestInvariantCompacted's
// newest mode failed about once in a hundred runs under load).
func (r *recorder) assertWindow(t *testing.T, w time.Duration, limit int) {
	t.Helper()
	scores := r.scores()
	most, end := core.FullestWindow(scores, w.Microseconds())
	if most <= limit {
		return
	}
	r.mu.Lock()
	in := slices.DeleteFunc(slices.Clone(r.list), func(a admission) bool { return a.score <= end-w.Microseconds() || a.score > end })
	gone := slices.Clone(r.gone)
	r.mu.Unlock()
	slices.SortFunc(in, func(a, b admission) int { return a.at.Compare(b.at) })
	for _, a := range in {
		t.Logf("admitted at %s: score %d, members %q", a.at.Format("15:04:05.000000"), a.score, a.members)
	}
	for _, a := range gone {
		t.Logf("given back at %s: members %q", a.at.Format("15:04:05.000000"), a.members)
	}
	t.Fatalf("sliding-window invariant broken: a window of %s holds %d admitted calls, limit %d (%d calls in all)",
		w, most, limit, len(scores))
}

// assertWindow fails the test when any window of length w holds more than
// limit of the scores.
func assertWindow(t *testing.T, scores []int64, w time.Duration, limit int) {
	t.Helper()
	if got := core.MaxInWindow(scores, w.Microseconds()); got > limit {
		t.Fatalf("sliding-window invariant broken: a window of %s holds %d admitted calls, limit %d (%d calls in all)",
			w, got, limit, len(scores))
	}
}

func mustNew(t testing.TB, c redis.UniversalClient, key string, limit int, interval time.Duration, opts ...Option) *Throttler {
	t.Helper()
	th, err := New(c, key, limit, interval, opts...)
	if err != nil {
		t.Fatalf("New(%q, %d, %s): %v", key, limit, interval, err)
	}
	return th
}

// waitIdle waits until th's worker has exited, so that nothing it still had
// to give back is in flight.
func waitIdle(t testing.TB, th *Throttler) {
	t.Helper()
	waitLocked(t, th, 10*time.Second, "worker or news listener still running 10s after the last call returned",
		func() bool { return !th.worker.running && !th.news.running })
}

// waitLocked waits up to within until cond, read under th's mutex, holds,
// and fails the test with failure if it does not.
func waitLocked(t testing.TB, th *Throttler, within time.Duration, failure string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		th.mu.Lock()
		ok := cond()
		th.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			// What the worker and the listener are doing, for the log.
			buf := make([]byte, 1<<20)
			t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
			t.Fatal(failure)
		}
		time.Sleep(time.Millisecond)
	}
}

// keyMembers returns the members of key and their scores, less the marker
// and the keeper.
func keyMembers(t *testing.T, c redis.UniversalClient, key string) map[string]int64 {
	t.Helper()
	zs, err := c.ZRangeWithScores(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", key, err)
	}
	m := map[string]int64{}
	for _, z := range zs {
		if name := z.Member.(string); name != redisstore.Marker && name != redisstore.KeeperMember && name != redisstore.TallyMember {
			m[name] = int64(z.Score)
		}
	}
	return m
}

// calls returns the members of key that are calls (no marker, pause,
// limit, back-off, margin or bucketed member) and their scores.
func calls(t *testing.T, c redis.UniversalClient, key string) map[string]int64 {
	t.Helper()
	m := keyMembers(t, c, key)
	for _, meta := range []string{redisstore.PauseMember, redisstore.LimitMember, redisstore.LimitEndMember, redisstore.BackoffMember, redisstore.BackoffEndMember, redisstore.WideMember, redisstore.WideEndMember, redisstore.BucketMember, redisstore.StampMember} {
		delete(m, meta)
	}
	return m
}

// serverMicros reads the backend's clock.
func serverMicros(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return tm.UnixMicro()
}
