package redisstore

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkCompactScript times CompactScript moving calls into their
// buckets on redis-server, as at the bench's ceiling: each run adds 2,048
// calls 13µs apart (75,000 a second) to a 1s window (1,024 buckets of about
// a millisecond), one in sixteen of them debt, and moves all but the
// newest 2,048 (core.CompactKeep), the run before's. It reports the script's
// wall time per call moved (ns/call), the reply's trip included. Runs
// wait for the server's clock to pass their calls: use -benchtime Nx.
func BenchmarkCompactScript(b *testing.B) {
	ctx := context.Background()
	c := redistest.Start(b).NewClient()
	key := redistest.Key(b, "compact-bench")
	const (
		calls  = 2048
		apart  = 13 // µs
		window = 1_050_000
		width  = window / 1024
	)
	if err := c.Del(ctx, key, CompactKey(key)).Err(); err != nil {
		b.Fatal(err)
	}
	var score, moved, took int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Each run's calls are new ones, the oldest half a window back at
		// most, ending before the server's clock: time passes as it would.
		for {
			t, err := c.Time(ctx).Result()
			if err != nil {
				b.Fatal(err)
			}
			now := t.UnixMicro()
			score = max(score, now-window/2)
			if score+calls*apart < now {
				break
			}
			time.Sleep(time.Duration(score+calls*apart-now) * time.Microsecond)
		}
		zs := make([]redis.Z, calls)
		for j := range zs {
			var m [9]byte
			binary.BigEndian.PutUint64(m[:], uint64(i*calls+j))
			if j%16 == 0 {
				m[0], m[1] = 0, 'd'
			}
			score += apart
			zs[j] = redis.Z{Score: float64(score), Member: string(m[:])}
		}
		if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		r, err := CompactScript.Run(ctx, c, []string{key, CompactKey(key)}, width, 10_000_000, window+2_000_000, 60_000, BucketMember, CompactBatch, RebuildFrom, calls, StampMember, DenseBucket).Int64Slice()
		if err != nil {
			b.Fatal(err)
		}
		moved += r[0]
	}
	b.StopTimer()
	took = b.Elapsed().Nanoseconds()
	// The newest 2,049 stay (the cut is the score of the one after the
	// newest 2,048): every run's calls but the last run's, and one.
	if want := max(0, int64(b.N-1)*calls-1); moved != want {
		b.Fatalf("moved %d calls, want %d", moved, want)
	}
	b.ReportMetric(float64(took)/float64(moved), "ns/call")
}
