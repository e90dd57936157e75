package throttler

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A reservation is one value: a call admitted to go as soon as the reply
// is back, then sent back to the queue (a shared pause arrived before it
// went) and admitted again by another path (here FailOpen's, Redis having
// failed meanwhile) for a later time, goes at that later time, not at once
// as its first admission said.
func TestRequeuedImmediateCallWaitsForItsNewSlot(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	defer c.Close()
	th := mustNew(t, c, "k", 10, time.Second, WithLogger(quiet), WithFailurePolicy(FailOpen()))
	const pause = 300 * time.Millisecond
	var pauseEnd time.Time
	th.hooks.onAdmit = func(int64, []string) {
		if !pauseEnd.IsZero() {
			return
		}
		// The reply admitting the call is being applied: another process's
		// pause lands now, and Redis goes away.
		pauseEnd = th.now().Add(pause)
		th.shared.pausedTill = th.clock.Server(pauseEnd)
		mr.SetError("injected: Redis is down")
	}
	if err := th.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if now := th.now(); now.Before(pauseEnd) {
		t.Fatalf("Wait returned %s before the pause it was sent back for ended", pauseEnd.Sub(now))
	}
	mr.SetError("")
	waitIdle(t, th)
}

// endingCtx is a context whose Err says it ended once end is set, while its
// Done channel never closes: the moment a real context is in when its
// deadline has passed but the timer that closes Done has not fired, or when
// a sleeping Wait's select took its own timer over a Done that closed with
// it. It makes that race deterministic.
type endingCtx struct {
	context.Context
	end atomic.Bool
}

func (c *endingCtx) Err() error {
	if c.end.Load() {
		return context.Canceled
	}
	return nil
}

// TestWaitNeverSucceedsAfterItsContextEnded: a Wait whose context ends while
// its slot is being reserved, or while it sleeps toward its slot, returns
// the context's error, not nil, and gives its slot back (the slot is free
// for the next call, and no member is left in Redis).
func TestWaitNeverSucceedsAfterItsContextEnded(t *testing.T) {
	for _, ahead := range []bool{false, true} {
		name := map[bool]string{false: "slot now", true: "slot ahead"}[ahead]
		t.Run(name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, dial dialer, key string) {
				const limit, interval = 2, 300 * time.Millisecond
				th := mustNew(t, dial(), key, limit, interval)
				if ahead {
					for range limit {
						if err := th.Wait(context.Background()); err != nil {
							t.Fatal(err)
						}
					}
				}
				ctx := &endingCtx{Context: context.Background()}
				var admitted, released int
				th.hooks.onAdmit = func(int64, []string) { admitted++; ctx.end.Store(true) }
				th.hooks.onRelease = func([]string) { released++ }
				err := th.Wait(ctx)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Wait with a context that ended when its slot was reserved = %v, want context.Canceled", err)
				}
				if admitted != 1 || released != 1 {
					t.Fatalf("admitted %d, given back %d: want the one slot given back", admitted, released)
				}
				waitIdle(t, th)
				th.hooks.onAdmit = nil
				if got := len(keyMembers(t, dial(), key)); got != map[bool]int{false: 0, true: limit}[ahead] {
					t.Fatalf("%d members in Redis after the give-back", got)
				}
			})
		})
	}
}

// TestEndedSeesAPassedDeadline: a deadline that passed counts as ended even
// before the context's timer fires, with an error for
// context.DeadlineExceeded.
func TestEndedSeesAPassedDeadline(t *testing.T) {
	ctx := deadlineOnly{Context: context.Background(), d: time.Now().Add(-time.Millisecond)}
	if !ended(ctx) {
		t.Fatal("ended(ctx past its deadline) = false")
	}
	if err := endedError(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("endedError = %v, want context.DeadlineExceeded", err)
	}
	if ended(deadlineOnly{Context: context.Background(), d: time.Now().Add(time.Hour)}) {
		t.Fatal("ended(ctx before its deadline) = true")
	}
}

// deadlineOnly has a deadline its Err does not report (its timer has not
// fired).
type deadlineOnly struct {
	context.Context
	d time.Time
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.d, true }

// A Wait woken late for its slot gives the slot back and would reserve
// again; when its context ended meanwhile, it reserves nothing more and
// returns the context's error. Found by CI on a loaded machine: a call
// admitted at once, late by the time it looked, was admitted a second time
// for a context that had ended.
func TestWaitLateAfterItsContextEndedReservesNoMore(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		var rec recorder
		th := lateWaker(t, c, key, 5, time.Second, &rec, 200*time.Millisecond, func(n int64) bool { return n == 1 })
		ctx := &endingCtx{Context: context.Background()}
		late := th.hooks.onAdmit
		admitted := 0
		th.hooks.onAdmit = func(s int64, m []string) { admitted++; ctx.end.Store(true); late(s, m) }
		if err := th.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
		waitIdle(t, th)
		if n := th.Stats().Sends.LateWakes; admitted != 1 || n != 1 {
			t.Fatalf("admitted %d times, late wakes %d: want one admission, given back when late, and no other", admitted, n)
		}
		if got := len(keyMembers(t, c, key)); got != 0 {
			t.Fatalf("%d members in Redis, want none", got)
		}
	})
}
