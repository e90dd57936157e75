package throttler

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
)

// A call sleeping toward a slot reserved ahead learns of a pause another
// replica sets without a round trip of its own: it gives the slot back and
// goes after the pause, not inside it.
func TestNewsReachesSleepers(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var rec recorder
		sleeper := rec.watch(mustNew(t, dial(), key, 10, 200*time.Millisecond, WithReserveAhead(time.Second), WithLogger(quiet)))
		other := mustNew(t, dial(), key, 10, 200*time.Millisecond, WithLogger(quiet))
		ctx := context.Background()
		if err := sleeper.WaitN(ctx, 10); err != nil { // the window is full
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 3 { // reserved ~250ms ahead: they sleep
			wg.Go(func() {
				if err := sleeper.Wait(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		waitLocked(t, sleeper, 5*time.Second, "the calls never slept toward their slots", func() bool {
			return sleeper.news.sleeping == 3 && sleeper.news.running && !sleeper.worker.running
		})
		// Let the listener's subscription take before the pause is set: a
		// pause set earlier is read when it does (see news.go), which
		// this test does not look at.
		time.Sleep(50 * time.Millisecond)
		if err := other.PauseUntil(ctx, time.Now().Add(600*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		v, err := dial().ZScore(ctx, key, redisstore.PauseMember).Result()
		if err != nil {
			t.Fatal(err)
		}
		end := -int64(v)
		wg.Wait()
		// The recorder keeps what was admitted and not given back.
		scores := rec.scores()
		slices.Sort(scores)
		if len(scores) != 13 {
			t.Fatalf("%d calls admitted, want 13", len(scores))
		}
		for _, s := range scores[10:] {
			if s < end {
				t.Errorf("a sleeper went at %dµs, inside the pause ending at %dµs", s, end)
			}
		}
		if sleeper.Stats().Pauses == 0 {
			t.Errorf("the sleeping replica never learned of the pause")
		}
		waitIdle(t, sleeper)
		waitIdle(t, other)
	})
}

// A worker that stops idle after its last plan left calls queued near the
// limit, all of which left since, lets the news listener end: the listener
// is not kept, with its subscription, until the next call. This run stops
// the worker at its next round (it fails when workerState.stopIdle leaves the
// flag set); the race that left it set before, callers all leaving during
// the round trip and the worker stopping right after it, is not pinned
// here.
func TestListenerEndsWithTheIdleWorker(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		// Slots reserved at most 100ms ahead: the Waits stay queued.
		th := mustNew(t, dial(), key, 2, time.Second, WithReserveAhead(100*time.Millisecond))
		for range 2 {
			if err := th.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		// As after a lost turn: rounds near the limit listen for the
		// slots others announce while calls stay queued.
		th.mu.Lock()
		th.known.Announce = core.ContendedRounds
		th.mu.Unlock()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(50*time.Millisecond, cancel)
				if err := th.Wait(ctx); err == nil {
					t.Error("a Wait was admitted in a full window")
				}
			})
		}
		wg.Wait()
		waitIdle(t, th)
	})
}
