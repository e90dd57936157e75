package impls

import (
	"context"
	"errors"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/go-throttler/throttler/bench/internal/redisserver"
	"github.com/redis/go-redis/v9"
)

func TestNewUUID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := newUUID(), newUUID()
	if !re.MatchString(a) || len(a) != 36 || a == b {
		t.Errorf("newUUID: %q, %q", a, b)
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New("nope", nil, Config{Limit: 1, Interval: time.Second}); err == nil {
		t.Error("unknown implementation accepted")
	}
	if _, err := New("seed", nil, Config{Limit: 0, Interval: time.Second}); err == nil {
		t.Error("limit 0 accepted")
	}
}

// TestQuota checks each port against a real Redis: a full quota goes at
// once, and the next call waits for room.
func TestQuota(t *testing.T) {
	if !redisserver.Available() {
		if os.Getenv("THROTTLER_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-server is not on PATH and THROTTLER_REQUIRE_REDIS=1")
		}
		t.Skip("redis-server is not on PATH")
	}
	ctx := context.Background()
	srv, err := redisserver.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()

	const limit, interval = 5, 400 * time.Millisecond
	for name, minNext := range map[string]time.Duration{
		"throttler":  300 * time.Millisecond, // the first call's slot frees a window later
		"seed":       300 * time.Millisecond,
		"redis_rate": 50 * time.Millisecond, // GCRA: one emission interval, 80ms
	} {
		t.Run(name, func(t *testing.T) {
			w, err := New(name, rdb, Config{Key: "test:" + name, Limit: limit, Interval: interval, Buffer: 10 * time.Millisecond, Procs: 1})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			start := time.Now()
			for i := range limit {
				if err := w.Wait(ctx); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			if d := time.Since(start); d > 150*time.Millisecond {
				t.Errorf("a full quota took %s", d)
			}
			if err := w.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d < minNext {
				t.Errorf("call %d went after %s, want at least %s", limit+1, d, minNext)
			}
		})
	}
}

// TestXRateDeadline: x/time/rate refuses a wait that would end after the
// context's deadline with a plain error; the port makes it
// context.DeadlineExceeded, as the others return, and returns at once.
func TestXRateDeadline(t *testing.T) {
	w, err := New("xrate", nil, Config{Limit: 1, Interval: time.Hour, Procs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err = w.Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past the deadline: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("refused after %s, want at once", d)
	}
}
