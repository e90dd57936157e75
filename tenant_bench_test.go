package throttler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redistest"
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
//     alone: what it adds to calm is the machine's share of the wait.
//
// Each iteration is a second of light calls, after 3s of warm-up (the
// flood's onset: see the harness's tenants scenarios); run it with
// -benchtime Nx, N seconds (60x: 720 light calls a case).
func BenchmarkLightBesideFlood(b *testing.B) {
	for _, mode := range []string{"calm", "flood", "flood-apart"} {
		b.Run(mode, func(b *testing.B) {
			srv := redistest.Start(b)
			key, other := srv.Key(b, "light"), srv.Key(b, "flood-apart")
			const replicas, floods, limit = 3, 30, 100
			newTh := func(key string) *Throttler {
				th, err := New(srv.NewClient(), key, limit, time.Second, WithLogger(quiet))
				if err != nil {
					b.Fatal(err)
				}
				return th
			}
			ths := make([]*Throttler, replicas)
			for i := range ths {
				ths[i] = newTh(key)
			}
			floodThs := ths
			if mode == "flood-apart" {
				floodThs = []*Throttler{newTh(other), newTh(other), newTh(other)}
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
			var waits []time.Duration
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
								waits = append(waits, took)
							})
						}
					})
				}
			}
			time.Sleep(3 * time.Second)
			mu.Lock()
			measure = time.Now()
			mu.Unlock()
			for b.Loop() {
				time.Sleep(time.Second)
			}
			mu.Lock()
			stop = time.Now()
			mu.Unlock()
			close(done)
			light.Wait()
			mu.Lock()
			defer mu.Unlock()
			if failed > 0 || len(waits) == 0 {
				b.Fatalf("%d light calls failed, %d admitted", failed, len(waits))
			}
			slices.Sort(waits)
			at := func(q float64) float64 {
				return float64(waits[min(len(waits)-1, int(q*float64(len(waits))))].Microseconds())
			}
			b.ReportMetric(at(0.5), "p50-µs")
			b.ReportMetric(at(0.99), "p99-µs")
			b.ReportMetric(float64(len(waits)), "light-calls")
			b.Log(fmt.Sprintf("%s: %d light calls, p50 %.0fµs, p99 %.0fµs, slowest %s", mode, len(waits), at(0.5), at(0.99), waits[len(waits)-1]))
		})
	}
}
