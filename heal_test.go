package throttler

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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
		heals += th.heals
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
