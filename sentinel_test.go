package throttler

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestSentinelFailover runs replicas through redis.NewFailoverClient, kills
// the master mid-run and lets Sentinel promote the replica. Calls fail
// (FailClosed) while there is no master, then resume on the new one; the
// limit holds throughout, healing whatever recent writes the replica missed.
func TestSentinelFailover(t *testing.T) {
	redistest.Long(t)
	s := redistest.StartSentinel(t)
	key := redistest.Key(t, "quota")
	const (
		limit    = 10
		interval = 300 * time.Millisecond
	)
	var rec recorder
	var ths []*Throttler
	for range 2 {
		var c redis.UniversalClient = s.NewFailoverClient(func(o *redis.FailoverOptions) {
			o.MaxRetries = -1
			o.DialTimeout = 200 * time.Millisecond
		})
		ths = append(ths, rec.watch(mustNew(t, c, key, limit, interval, WithLogger(quiet), WithRedisTimeout(300*time.Millisecond))))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for _, th := range ths {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					err := th.Wait(ctx)
					switch {
					case err == nil, errors.Is(err, context.Canceled):
					case errors.Is(err, ErrRedis):
						mu.Lock()
						failed++
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
					default:
						t.Errorf("Wait: %v", err)
						return
					}
				}
			}()
		}
	}
	for len(rec.scores()) < 3*limit {
		time.Sleep(5 * time.Millisecond)
	}
	old := s.Master.Addr()
	s.Master.Kill(t)
	killed := time.Now()
	for {
		addr, err := s.MasterAddr()
		if err == nil && addr != old {
			break
		}
		if time.Since(killed) > 30*time.Second {
			cancel()
			wg.Wait()
			t.Fatalf("Sentinel did not promote the replica within 30s (last answer %q, %v)", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	promoted := time.Since(killed)
	before := len(rec.scores())
	for len(rec.scores()) < before+3*limit {
		if time.Since(killed) > 60*time.Second {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	after := len(rec.scores()) - before // before cancel gives back the slots held ahead
	cancel()
	wg.Wait()
	for _, th := range ths {
		waitIdle(t, th)
	}
	if after < 3*limit {
		t.Fatalf("only %d admissions after the failover, want at least %d", after, 3*limit)
	}
	assertWindow(t, rec.scores(), interval+50*time.Millisecond, limit)
	t.Logf("failover after %s; %d calls failed with ErrRedis meanwhile; %d admissions in all", promoted.Round(time.Millisecond), failed, len(rec.scores()))
}
