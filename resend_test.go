package throttler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A reservation round trip whose reply is lost after Redis applied it (a
// MULTI/EXEC, which go-redis does not send again once written) is sent
// again on another connection: no call fails for it under FailClosed, the
// window holds, and nothing the first application wrote is left behind.
func TestRoundResentWhenItsReplyIsLost(t *testing.T) {
	eachBackend(t, func(t *testing.T, dialBackend dialer, key string) {
		cutter := &redistest.Cutter{}
		dial := func() redis.UniversalClient {
			return dialBackend(func(o *redis.Options) { o.Dialer = cutter.Dial })
		}
		const limit, interval = 5, 300 * time.Millisecond
		var rec recorder
		ths := make([]*Throttler, 3)
		for i := range ths {
			ths[i] = rec.watch(mustNew(t, dial(), key, limit, interval))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		var wg sync.WaitGroup
		wg.Go(func() {
			for ctx.Err() == nil {
				// The reservations near the limit (MULTI ... ZCOUNT ...
				// EXEC): give-backs fail too when theirs is cut, and
				// are written later, which this test does not try.
				cutter.Cut(1, "zcount")
				time.Sleep(60 * time.Millisecond)
			}
		})
		for _, th := range ths {
			for range 4 {
				wg.Go(func() {
					for ctx.Err() == nil {
						if err := th.Wait(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("Wait: %v", err)
						}
					}
				})
			}
		}
		wg.Wait()
		cutter.Cut(0, "")
		var retried uint64
		for _, th := range ths {
			waitIdle(t, th)
			s := th.Stats()
			retried += s.Redis.RoundsRetried
			if s.Failed > 0 {
				t.Errorf("%d waits failed", s.Failed)
			}
		}
		if cutter.Cuts() == 0 || retried == 0 {
			t.Fatalf("%d replies lost, %d round trips sent again: the test did not try what it is for", cutter.Cuts(), retried)
		}
		assertWindow(t, rec.scores(), interval, limit)
		admitted := rec.members()
		for m := range calls(t, dial(), key) {
			if !admitted[m] && !strings.HasPrefix(m, core.DebtPrefix) {
				t.Errorf("member %q is in the set, not admitted: a resend left it behind", m)
			}
		}
		t.Logf("%d replies lost, %d round trips sent again, %d calls admitted", cutter.Cuts(), retried, len(rec.scores()))
	})
}
