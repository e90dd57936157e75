package throttler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redistest"
)

// The Redis benchmarks run against a real redis-server on loopback (started
// by redistest, or REDIS_URL). Run them with
//
//	go test -run '^$' -bench . -benchmem
//
// BenchmarkPing is the floor: one round trip on the same client.

func BenchmarkPing(b *testing.B) {
	c := redistest.Start(b).NewClient()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWaitUnthrottled: one goroutine, a limit never reached. Each Wait
// is one round trip (a MULTI/EXEC of 7 commands) plus the hand-off to the
// worker goroutine and back.
func BenchmarkWaitUnthrottled(b *testing.B) {
	srv := redistest.Start(b)
	th, err := New(srv.NewClient(), srv.Key(b, "bench"), 1<<30, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := th.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWaitUnthrottledParallel: many goroutines on one Throttler; their
// reservations are batched, up to 64 per round trip.
func BenchmarkWaitUnthrottledParallel(b *testing.B) {
	srv := redistest.Start(b)
	th, err := New(srv.NewClient(), srv.Key(b, "bench"), 1<<30, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := th.Wait(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkAllowUnthrottled(b *testing.B) {
	srv := redistest.Start(b)
	th, err := New(srv.NewClient(), srv.Key(b, "bench"), 1<<30, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res, err := th.Allow(ctx); err != nil || !res.Allowed {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkAdmit and BenchmarkNextSlots: the window arithmetic of one round
// trip, without I/O.
func BenchmarkAdmit(b *testing.B) {
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprint("claims=", n), func(b *testing.B) {
			claims := make([]claim, n)
			checks := make([]int64, n)
			counts := make([]int64, n)
			for i := range claims {
				claims[i] = claim{score: int64(i * 10), n: 1}
				checks[i] = int64(i * 10)
				counts[i] = int64(n)
			}
			b.ReportAllocs()
			for b.Loop() {
				admit(claims, checks, counts, 1000, 1000)
			}
		})
	}
}

func BenchmarkNextSlots(b *testing.B) {
	const limit, k = 5000, 64
	tail := make([]entry, k+8)
	for i := range tail {
		tail[i] = entry{score: int64(i * 100), member: fmt.Sprint(i)}
	}
	dropped := tail[k : k+8]
	b.ReportAllocs()
	for b.Loop() {
		nextSlots(tail, dropped, limit, k, 8, 1_000_000)
	}
}
