package throttler

import (
	"context"
	"crypto/sha1"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkLightBesideFlood tells how much of a light tenant's wait beside
// a flood is the shared quota's and how much the machine's: issue 43's
// flood in one process, on redis-server. Three Throttlers share a key of
// 100 a second (the replicas); tenants B and C each call Wait twice a
// second on each, open loop, and the benchmark reports their waits' p50
// and p99 (µs):
//
//   - calm: B and C alone;
//   - flood: tenant A floods the same key from 30 goroutines on each
//     Throttler (issue 43's target: the p99 at most 2x calm's);
//   - flood-apart: A floods as much, from three Throttlers of its own on
//     another key, so the machine is as busy but the quota is B's and C's
//     alone: what it adds to calm is the machine's share of the wait;
//   - flood-own: A floods the same key, from three Throttlers of its own
//     (as many more replicas that carry the flood alone), so the quota is
//     shared but no light call waits for a round trip of its own
//     Throttler's that claims for the flood: what is left over calm is
//     the shared quota's, Redis's and the machine's, the least a second
//     round trip in flight for light calls could leave.
//
// Each iteration is a second of light calls, after 3s of warm-up (the
// flood's onset: see the harness's tenants scenarios); run it with
// -benchtime Nx, N seconds (60x: 720 light calls a case).
//
// It also tells apart the light calls during whose wait their Throttler
// had a round trip under way that claimed for the capped flood
// (TenantPeakScript): held-% is their share, and p99-clear-µs the p99 of
// the others. A Throttler makes one round trip at a time, so a light call
// that comes as a flood's round trip is planned or sent waits for it
// before its own; the share also counts flood round trips that only began
// as the light call's caller was being woken, which did not delay it.
//
// With -bench.redistime it also reports how busy Redis was while it
// measured (redis-busy-%) and the p99 of TenantPeakScript's runs inside
// Redis (flood-script-p99-µs), and logs each command's and script's
// times (see redisTime).
func BenchmarkLightBesideFlood(b *testing.B) {
	for _, mode := range []string{"calm", "flood", "flood-apart", "flood-own"} {
		b.Run(mode, func(b *testing.B) {
			srv := redistest.Start(b)
			key, other := srv.Key(b, "light"), srv.Key(b, "flood-apart")
			const replicas, floods, limit = 3, 30, 100
			var rt *redisTime
			client := func() *redis.Client { return srv.NewClient() }
			if *benchRedisTime {
				rt = newRedisTime(srv.NewClient())
				client = func() *redis.Client {
					c := srv.NewClient()
					c.AddHook(rt.hook())
					return c
				}
			}
			newTh := func(key string) *Throttler { // the flood's own
				th, err := New(client(), key, limit, time.Second, WithLogger(quiet))
				if err != nil {
					b.Fatal(err)
				}
				return th
			}
			ths := make([]*Throttler, replicas)
			logs := make([]*floodRounds, replicas)
			for i := range ths {
				logs[i] = &floodRounds{}
				rdb := client()
				rdb.AddHook(logs[i])
				th, err := New(rdb, key, limit, time.Second, WithLogger(quiet))
				if err != nil {
					b.Fatal(err)
				}
				ths[i] = th
			}
			floodThs := ths
			switch mode {
			case "flood-apart":
				floodThs = []*Throttler{newTh(other), newTh(other), newTh(other)}
			case "flood-own":
				floodThs = []*Throttler{newTh(key), newTh(key), newTh(key)}
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer func() {
				cancel()
				wg.Wait()
			}()
			if mode != "calm" {
				flood := ContextWithTenant(ctx, "A")
				for _, th := range floodThs {
					for range floods {
						wg.Go(func() {
							for th.Wait(flood) == nil {
							}
						})
					}
				}
			}
			// Light calls begun from measure on, before stop, are measured.
			var measure, stop time.Time
			var mu sync.Mutex
			var waits []lightWait
			failed := 0
			done := make(chan struct{})
			var light sync.WaitGroup
			start := time.Now()
			for i, th := range ths {
				for j, tenant := range []string{"B", "C"} {
					tctx := ContextWithTenant(ctx, tenant)
					const period = 500 * time.Millisecond
					// Fixed periods from phases spread over the period.
					phase := time.Duration(2*i+j) * period / (2 * replicas)
					light.Go(func() {
						var calls sync.WaitGroup
						defer calls.Wait()
						tick := time.NewTimer(time.Until(start.Add(phase)))
						defer tick.Stop()
						for at := start.Add(phase); ; at = at.Add(period) {
							select {
							case <-done:
								return
							case <-tick.C:
							}
							tick.Reset(time.Until(at.Add(period)))
							calls.Go(func() {
								began := time.Now()
								err := th.Wait(tctx)
								took := time.Since(began)
								mu.Lock()
								defer mu.Unlock()
								if measure.IsZero() || began.Before(measure) || (!stop.IsZero() && began.After(stop)) {
									return
								}
								if err != nil {
									failed++
									return
								}
								waits = append(waits, lightWait{replica: i, began: began, took: took})
							})
						}
					})
				}
			}
			time.Sleep(3 * time.Second)
			if rt != nil {
				rt.begin(b)
			}
			mu.Lock()
			measure = time.Now()
			mu.Unlock()
			for b.Loop() {
				time.Sleep(time.Second)
			}
			mu.Lock()
			stop = time.Now()
			mu.Unlock()
			if rt != nil {
				rt.report(b, mode)
			}
			close(done)
			light.Wait()
			mu.Lock()
			defer mu.Unlock()
			if failed > 0 || len(waits) == 0 {
				b.Fatalf("%d light calls failed, %d admitted", failed, len(waits))
			}
			var all, clear []time.Duration
			for _, lw := range waits {
				all = append(all, lw.took)
				if !logs[lw.replica].during(lw.began, lw.began.Add(lw.took)) {
					clear = append(clear, lw.took)
				}
			}
			held := 100 * float64(len(all)-len(clear)) / float64(len(all))
			b.ReportMetric(quantile(all, 0.5), "p50-µs")
			b.ReportMetric(quantile(all, 0.99), "p99-µs")
			b.ReportMetric(quantile(clear, 0.99), "p99-clear-µs")
			b.ReportMetric(held, "held-%")
			b.ReportMetric(float64(len(all)), "light-calls")
			b.Log(fmt.Sprintf("%s: %d light calls, p50 %.0fµs, p99 %.0fµs, slowest %s; %.1f%% held a flood's round trip, the others' p99 %.0fµs",
				mode, len(all), quantile(all, 0.5), quantile(all, 0.99), slices.Max(all), held, quantile(clear, 0.99)))
		})
	}
}

// lightWait is a light call of BenchmarkLightBesideFlood: on which
// Throttler, when it began, and how long Wait took.
type lightWait struct {
	replica int
	began   time.Time
	took    time.Duration
}

// quantile is the q quantile of d, in µs (0 for none); it sorts d.
func quantile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds())
}

// floodRounds is a go-redis hook that keeps when each round trip that
// claimed for a capped tenant (TenantPeakScript) was sent and answered.
type floodRounds struct {
	mu    sync.Mutex
	spans [][2]time.Time
}

func (f *floodRounds) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (f *floodRounds) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (f *floodRounds) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	sha := redisstore.TenantPeakScript.Hash()
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmds)
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
			a := c.Args()
			if len(a) < 2 {
				return false
			}
			src, _ := a[1].(string)
			return c.Name() == "evalsha" && src == sha || c.Name() == "eval" && fmt.Sprintf("%x", sha1.Sum([]byte(src))) == sha
		}) {
			f.mu.Lock()
			f.spans = append(f.spans, [2]time.Time{sent, time.Now()})
			f.mu.Unlock()
		}
		return err
	}
}

// during reports whether a flood's round trip was under way at some time
// in [from, to].
func (f *floodRounds) during(from, to time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.spans, func(s [2]time.Time) bool { return s[1].After(from) && s[0].Before(to) })
}
