package throttler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestHostileState: a key that holds another type, members the library did
// not write, garbage scores far in the past or future, and a key deleted
// mid-run. Each gives a clear error or repairs itself; none panics, hangs
// or over-admits.
func TestHostileState(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ctx := context.Background()
		c := dial()

		t.Run("wrong type", func(t *testing.T) {
			k := key + ":string"
			if err := c.Set(ctx, k, "not a sorted set", 0).Err(); err != nil {
				t.Fatal(err)
			}
			th := mustNew(t, dial(), k, 5, time.Second, WithLogger(quiet))
			err := th.Wait(ctx)
			if !errors.Is(err, ErrRedis) || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Fatalf("Wait on a string key: got %v, want ErrRedis carrying WRONGTYPE", err)
			}
			if _, err := th.Allow(ctx); !errors.Is(err, ErrRedis) {
				t.Fatalf("Allow on a string key: got %v, want ErrRedis", err)
			}
			waitIdle(t, th)
		})

		t.Run("foreign members count", func(t *testing.T) {
			// Members someone else wrote at "now" are calls as far as the
			// window is concerned: they take room, and nothing breaks.
			k := key + ":foreign"
			now := serverMicros(t, c)
			for i, m := range []string{"x", "a much longer member than ours, 60 bytes or so ..........", "\x00\xff"} {
				if err := c.ZAdd(ctx, k, redis.Z{Score: float64(now + int64(i)), Member: m}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var rec recorder
			th := rec.watch(mustNew(t, dial(), k, 5, 10*time.Second))
			for range 2 {
				if err := th.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			short, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if err := th.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("third Wait with 3 foreign + 2 own members in a window of 5: got %v, want DeadlineExceeded", err)
			}
			waitIdle(t, th)
		})

		t.Run("garbage scores", func(t *testing.T) {
			// Scores far outside any window: the distant past (counted by no
			// window, trimmed) and far future (counted by no window, trimmed
			// once seen), negative ones (never counted).
			k := key + ":garbage"
			now := serverMicros(t, c)
			zs := []redis.Z{
				{Score: 1, Member: "epoch"},
				{Score: -1e15, Member: "negative"},
				{Score: float64(now) + 1e14, Member: "far-future"},
				{Score: 9e15, Member: "huge"},
			}
			if err := c.ZAdd(ctx, k, zs...).Err(); err != nil {
				t.Fatal(err)
			}
			var rec recorder
			th := rec.watch(mustNew(t, dial(), k, 3, 30*time.Millisecond, WithBuffer(0)))
			for range 9 {
				if err := th.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			waitIdle(t, th)
			assertWindow(t, rec.scores(), 30*time.Millisecond, 3)
			left := keyMembers(t, c, k)
			for _, m := range []string{"epoch", "far-future", "huge"} {
				if _, ok := left[m]; ok {
					t.Errorf("garbage member %q still in the set after 9 admissions", m)
				}
			}
		})

		t.Run("key deleted mid-run", func(t *testing.T) {
			k := key + ":deleted"
			var rec recorder
			th := rec.watch(mustNew(t, dial(), k, 3, 10*time.Second, WithLogger(quiet)))
			for range 3 {
				if err := th.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
			// The window is full for 10s: with the key gone, the next call
			// that reserves must notice and pause every process until the
			// lost calls stop counting, not admit. (A call whose deadline
			// ends before the next free slot known fails without a round
			// trip, and notices nothing: its deadline reaches past that
			// slot, and not past the pause.)
			deleted := serverMicros(t, c)
			short, cancel := context.WithTimeout(ctx, 10*time.Second+th.rules.Buffer+500*time.Millisecond)
			defer cancel()
			if err := th.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait after the key was deleted under a full window: got %v, want DeadlineExceeded", err)
			}
			waitIdle(t, th)
			until := -keyMembers(t, c, k)[redisstore.PauseMember]
			if want := deleted + (10*time.Second + th.rules.Buffer).Microseconds(); until < want {
				t.Fatalf("after the key was deleted the shared pause ends %s after the deletion, want at least a window (%s)",
					time.Duration(until-deleted)*time.Microsecond, 10*time.Second+th.rules.Buffer)
			}
		})
	})
}
