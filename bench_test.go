package throttler

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
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

// BenchmarkThreeCommands is the floor of an unthrottled Wait's round trip:
// the pipeline it sends (ZADD of one member, ZCOUNT of its neighbourhood,
// ZMSCORE of the key's seven meta members), on the same kind of client,
// without the library. Beside BenchmarkPing it shows what the protocol
// costs; beside BenchmarkWaitUnthrottled, what the library adds.
func BenchmarkThreeCommands(b *testing.B) {
	for _, tc := range []struct {
		name      string
		configure func(*redis.Options)
	}{
		{"client=default", func(*redis.Options) {}},
		{"client=ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			c := srv.NewClient(tc.configure)
			key := srv.Key(b, "bench")
			meta := []string{redisstore.Marker, redisstore.PauseMember, redisstore.LimitMember, redisstore.LimitEndMember,
				redisstore.WideMember, redisstore.WideEndMember, redisstore.BucketMember, redisstore.TallyMember}
			ctx := context.Background()
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				now := time.Now().UnixMicro()
				n++
				_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.ZAdd(ctx, key, redis.Z{Score: float64(now), Member: n})
					p.ZCount(ctx, key, "("+strconv.FormatInt(now-1_050_000, 10), "("+strconv.FormatInt(now+1_050_000, 10))
					p.ZMScore(ctx, key, meta...)
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				if n%1000 == 0 { // trim, as the library does every 100ms
					c.ZRemRangeByScore(ctx, key, "0", "("+strconv.FormatInt(now-2_000_000, 10))
				}
			}
		})
	}
}

// oneScript is BenchmarkThreeCommands' pipeline as one script: what a
// round trip of one command would cost.
var oneScript = redis.NewScript(`
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
return {redis.call('ZCOUNT', KEYS[1], ARGV[3], ARGV[4]), redis.call('ZMSCORE', KEYS[1], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12])}
`)

// BenchmarkOneScript: the same as BenchmarkThreeCommands in one EVALSHA.
func BenchmarkOneScript(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.NewClient(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	key := srv.Key(b, "bench")
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		now := time.Now().UnixMicro()
		n++
		err := oneScript.Run(ctx, c, []string{key}, now, n, "("+strconv.FormatInt(now-1_050_000, 10), "("+strconv.FormatInt(now+1_050_000, 10),
			redisstore.Marker, redisstore.PauseMember, redisstore.LimitMember, redisstore.LimitEndMember,
			redisstore.WideMember, redisstore.WideEndMember, redisstore.BucketMember, redisstore.TallyMember).Err()
		if err != nil {
			b.Fatal(err)
		}
		if n%1000 == 0 {
			c.ZRemRangeByScore(ctx, key, "0", "("+strconv.FormatInt(now-2_000_000, 10))
		}
	}
}

// BenchmarkWaitUnthrottled: one goroutine, a limit never reached. Each Wait
// is one round trip (a pipeline of ZADD, ZCOUNT, ZMSCORE, plus the upkeep
// commands when they are due) made in the caller's goroutine. With a default
// client the round trip runs in a helper goroutine so that the Redis
// timeout holds (go-redis honours context deadlines only with
// ContextTimeoutEnabled); with ContextTimeoutEnabled it runs in the
// caller's goroutine.
func BenchmarkWaitUnthrottled(b *testing.B) {
	for _, tc := range []struct {
		name      string
		configure func(*redis.Options)
	}{
		{"client=default", func(*redis.Options) {}},
		{"client=ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			th, err := New(srv.NewClient(tc.configure), srv.Key(b, "bench"), 1<<30, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			benchWait(b, th)
		})
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

// BenchmarkCancellationStorm: 32 goroutines per core keep a Throttler
// saturated (100 calls per 200ms). In "storm", every Wait has a deadline of
// 10-500ms, so most give up; in "calm", none does. Reported per run:
//
//	late-p99-ms   how long after its deadline an abandoned Wait returned (p99
//	late-max-ms   and max; one refused at once, its slot being past the
//	              deadline, counts 0)
//	abandoned     Waits that returned an error
//	util-%        admissions against limit per (interval + buffer)
//	left          members of abandoned calls left in the set afterwards
//
// Compare util-% of the two to see what cancellations cost in quota.
func BenchmarkCancellationStorm(b *testing.B) {
	for _, storm := range []bool{false, true} {
		name := "calm"
		if storm {
			name = "storm"
		}
		b.Run(name, func(b *testing.B) {
			const limit, interval = 100, 200 * time.Millisecond
			srv := redistest.Start(b)
			var rec recorder
			th := rec.watch(mustNew(b, srv.NewClient(), srv.Key(b, "storm"), limit, interval))
			var mu sync.Mutex
			var late []time.Duration
			start := time.Now()
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					var deadline time.Time
					if storm {
						deadline = time.Now().Add(time.Duration(10+rand.IntN(490)) * time.Millisecond)
						ctx, cancel = context.WithDeadline(ctx, deadline)
					}
					err := th.Wait(ctx)
					back := time.Now()
					cancel()
					if err != nil {
						mu.Lock()
						late = append(late, max(0, back.Sub(deadline)))
						mu.Unlock()
					}
				}
			})
			elapsed := time.Since(start)
			waitIdle(b, th)
			ours := rec.members()
			left := 0
			zs, _ := srv.NewClient().ZRange(context.Background(), th.Key(), 0, -1).Result()
			for _, m := range zs {
				if m != redisstore.Marker && m != redisstore.TallyMember && !ours[m] {
					left++
				}
			}
			w := interval + th.rules.Buffer
			b.ReportMetric(100*float64(len(rec.scores()))/(float64(limit)*elapsed.Seconds()/w.Seconds()), "util-%")
			b.ReportMetric(float64(left), "left")
			if len(late) > 0 {
				slices.Sort(late)
				b.ReportMetric(float64(late[len(late)*99/100].Microseconds())/1000, "late-p99-ms")
				b.ReportMetric(float64(late[len(late)-1].Microseconds())/1000, "late-max-ms")
				b.ReportMetric(float64(len(late)), "abandoned")
			}
		})
	}
}

// BenchmarkShadowWait: what a Wait costs in shadow mode (WithShadow), on a
// redis-server, beside an enforcing Wait under the limit: under it, a
// shadow call is claimed now or never, as AllowN's are; over it (a limit of
// 1 an hour: every call but the first), it is also written as debt where it
// goes, one more round trip. The window is a log (WithCompactFrom(0)), as
// the figures in docs/recipes.md were measured; a limit this large would
// compact it by default.
func BenchmarkShadowWait(b *testing.B) {
	for _, tc := range []struct {
		name  string
		limit int
		opts  []Option
	}{
		{"mode=enforce/under-limit", 1 << 30, []Option{WithCompactFrom(0)}},
		{"mode=shadow/under-limit", 1 << 30, []Option{WithCompactFrom(0), WithShadow()}},
		{"mode=shadow/over-limit", 1, []Option{WithCompactFrom(0), WithShadow()}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			th, err := New(srv.NewClient(), srv.Key(b, "bench"), tc.limit, time.Hour, tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			benchWait(b, th)
		})
	}
}

// benchWait times th.Wait, one call after another.
func benchWait(b *testing.B, th *Throttler) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := th.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
