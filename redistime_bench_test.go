package throttler

import (
	"context"
	"crypto/sha1"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

var benchRedisTime = flag.Bool("bench.redistime", false,
	"BenchmarkLightBesideFlood: also report Redis's own time per command and script while it measures, from its SLOWLOG")

// redisTime times, from Redis's SLOWLOG, every command a benchmark's
// clients send while it measures: how busy Redis was, and how long each
// kind of command or script ran inside it (the round trip's wait in Redis
// behind other clients' commands is not in it). A call waits, in Redis,
// for whatever command runs as its own arrives: a script of several
// hundred µs is a light call's tail. The throttler sends its scripts by
// their text (EVAL), which SLOWLOG keeps cut to 128 bytes with the count
// of the rest; a script is known by its length, learned by a go-redis
// hook on the clients (hook) as they send it.
type redisTime struct {
	admin *redis.Client
	mu    sync.Mutex
	byLen map[int]string // script text's length: the script's name
	start time.Time
}

// newRedisTime returns a redisTime for the server admin is a client of.
func newRedisTime(admin *redis.Client) *redisTime {
	return &redisTime{admin: admin, byLen: map[int]string{}}
}

// begin has Redis log every command from now on, and forgets those before.
func (r *redisTime) begin(b *testing.B) {
	ctx := context.Background()
	for _, err := range []error{
		r.admin.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(),
		r.admin.ConfigSet(ctx, "slowlog-max-len", "1000000").Err(),
		r.admin.SlowLogReset(ctx).Err(),
	} {
		if err != nil {
			b.Fatal(err)
		}
	}
	r.start = time.Now()
}

// report reads the commands Redis logged since begin and reports them:
// redis-busy-% (the share of the time Redis ran commands), and the p99 of
// TenantPeakScript's runs (flood-script-p99-µs); and it logs, per kind,
// how many ran, their total, p50, p99 and slowest.
func (r *redisTime) report(b *testing.B, mode string) {
	ctx := context.Background()
	wall := time.Since(r.start)
	logs, err := r.admin.SlowLogGet(ctx, -1).Result()
	if err != nil {
		b.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	by := map[string][]time.Duration{}
	var busy time.Duration
	for _, l := range logs {
		kind := strings.ToLower(fmt.Sprint(l.Args[0]))
		if kind == "eval" && len(l.Args) > 1 {
			kind = "eval (another script)"
			src := fmt.Sprint(l.Args[1])
			n := len(src)
			if i := strings.LastIndex(src, "... ("); i >= 0 {
				var more int
				if _, err := fmt.Sscanf(src[i:], "... (%d more bytes)", &more); err == nil {
					n = i + more
				}
			}
			if name, ok := r.byLen[n]; ok {
				kind = name
			}
		}
		by[kind] = append(by[kind], l.Duration)
		busy += l.Duration
	}
	if len(logs) == 0 {
		return
	}
	b.ReportMetric(100*busy.Seconds()/wall.Seconds(), "redis-busy-%")
	b.ReportMetric(quantile(slices.Clone(by["TenantPeakScript"]), 0.99), "flood-script-p99-µs")
	kinds := slices.Sorted(func(yield func(string) bool) {
		for k := range by {
			if !yield(k) {
				return
			}
		}
	})
	b.Logf("%s: Redis ran %d commands for %s of %s (%.1f%%)", mode, len(logs), busy, wall.Round(time.Millisecond), 100*busy.Seconds()/wall.Seconds())
	for _, k := range kinds {
		d := by[k]
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		b.Logf("  %-22s %6d runs, %10s in all, p50 %5.0fµs, p99 %5.0fµs, slowest %s", k, len(d), sum, quantile(d, 0.5), quantile(d, 0.99), slices.Max(d))
	}
}

// hook returns a go-redis hook that learns the scripts' lengths from the
// scripts a client sends.
func (r *redisTime) hook() redis.Hook { return scriptLens{r} }

// scriptLens is redisTime's hook.
type scriptLens struct{ r *redisTime }

func (h scriptLens) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptLens) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.learn(cmd)
		return next(ctx, cmd)
	}
}

func (h scriptLens) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.learn(c)
		}
		return next(ctx, cmds)
	}
}

// learn keeps the length of cmd's script, when it sends one by its text.
func (h scriptLens) learn(cmd redis.Cmder) {
	a := cmd.Args()
	if cmd.Name() != "eval" || len(a) < 2 {
		return
	}
	src, _ := a[1].(string)
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if _, ok := h.r.byLen[len(src)]; ok {
		return // known: no digest on every round trip
	}
	sum := fmt.Sprintf("%x", sha1.Sum([]byte(src)))
	for name, s := range redisstore.Scripts() {
		if s.Hash() == sum {
			h.r.byLen[len(src)] = name
		}
	}
}
