package throttler

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/redisstore"
)

// tenantState lists what th holds for the tenants named by have, under
// its mutex: the fair order's table (by name) and every map of what is
// known of the shares (by tag, whatever its fields: core.TenantShares),
// as "where: tenant" lines.
func tenantState(th *Throttler, have func(name string) bool) []string {
	tags := map[string]string{}
	for tag, name := range churnTags() {
		if have(name) {
			tags[tag] = name
		}
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	var out []string
	for p, l := range th.worker.fair.level {
		for name := range l.finish {
			if have(name) {
				out = append(out, fmt.Sprintf("fair order (level %d): %s", p, name))
			}
		}
	}
	return append(out, mapsByTag(reflect.ValueOf(th.known.Tenants), "known.Tenants", tags)...)
}

// mapsByTag names every key of tags found in a map keyed by string in
// struct v, or in a struct within it, which path names.
func mapsByTag(v reflect.Value, path string, tags map[string]string) []string {
	var out []string
	for i := range v.NumField() {
		f, name := v.Field(i), path+"."+v.Type().Field(i).Name
		switch {
		case f.Kind() == reflect.Struct:
			out = append(out, mapsByTag(f, name, tags)...)
		case f.Kind() == reflect.Map && f.Type().Key().Kind() == reflect.String:
			for _, k := range f.MapKeys() {
				if tenant, ok := tags[k.String()]; ok {
					out = append(out, fmt.Sprintf("%s: %s", name, tenant))
				}
			}
		}
	}
	return out
}

// churnTenants is how many tenants come and go in the churn tests, each
// with churnCalls calls made at once (the second waits behind the first:
// the tenant is backlogged, and may be capped).
const (
	churnTenants = 1000
	churnCalls   = 2
)

func churnName(i int) string { return fmt.Sprintf("churn-%04d", i) }

// isChurn reports whether name is a churn tenant's.
func isChurn(name string) bool { return strings.HasPrefix(name, "churn-") }

// churnTags maps the tag the members of each churn tenant's calls carry
// (weight 1) to its name.
var churnTags = sync.OnceValue(func() map[string]string {
	tags := make(map[string]string, churnTenants)
	for i := range churnTenants {
		name := churnName(i)
		tags[redisstore.TenantTag(redisstore.TenantSuffix(name, 1))] = name
	}
	return tags
})

// churn has tenants from..to-1 each make churnCalls calls at once on the
// replicas in turn, workers tenants at a time (each worker pausing pause
// after each tenant), and returns when all were admitted.
func churn(t *testing.T, ths []*Throttler, from, to, workers int, pause time.Duration) {
	t.Helper()
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				ctx := ContextWithTenant(context.Background(), churnName(i))
				var calls sync.WaitGroup
				for k := range churnCalls {
					calls.Go(func() {
						if err := ths[(i+k)%len(ths)].Wait(ctx); err != nil {
							t.Errorf("%s: %v", churnName(i), err)
						}
					})
				}
				calls.Wait()
				time.Sleep(pause)
			}
		})
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// The churn tests' quota.
const (
	churnLimit    = 100
	churnInterval = 100 * time.Millisecond
)

// churnReplicas returns 2 Throttlers on key, as 2 replicas have, their
// admissions watched by rec, with a Redis timeout of 5s: a loaded machine
// running the race detector may take more than the default to answer,
// and a call failed so is not what these tests are about.
func churnReplicas(t *testing.T, dial dialer, key string, rec *recorder) []*Throttler {
	var ths []*Throttler
	for range 2 {
		ths = append(ths, rec.watch(mustNew(t, dial(), key, churnLimit, churnInterval, WithRedisTimeout(5*time.Second))))
	}
	return ths
}

// floodedReplicas returns churnReplicas on key, their recorder, and
// floodAll's stop for a flood on them.
func floodedReplicas(t *testing.T, dial dialer, key string) ([]*Throttler, *recorder, func()) {
	var rec recorder
	ths := churnReplicas(t, dial, key, &rec)
	return ths, &rec, floodAll(ths)
}

// floodAll has a tenant, "flood", wait in 4 goroutines on each of ths
// until the function it returns is called (once or more), which returns
// once they have.
func floodAll(ths []*Throttler) (stop func()) {
	var run tenantRun
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, th := range ths {
		run.flood(ctx, &wg, th, "flood", 4)
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// awaitNoState waits, up to within, until no replica holds anything of
// the tenants have names, and fails the test with what they still hold
// if one does.
func awaitNoState(t *testing.T, ths []*Throttler, have func(string) bool, within time.Duration, when string) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(within); ; time.Sleep(5 * time.Millisecond) {
		left = left[:0]
		for i, th := range ths {
			for _, s := range tenantState(th, have) {
				left = append(left, fmt.Sprintf("replica %d %s", i, s))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("%s, %s after the tenants left, the replicas still hold %d entries of theirs, such as %v",
		when, within, len(left), left[:min(len(left), 6)])
}

// awaitNoMembers waits, up to within, until key holds no member of the
// tenants have names, and fails the test if it still does.
func awaitNoMembers(t *testing.T, dial dialer, key string, have func(string) bool, within time.Duration) {
	t.Helper()
	c := dial()
	var held int
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		held = 0
		for m := range keyMembers(t, c, key) {
			if len(m) > redisstore.TenantSuffixLen && strings.HasPrefix(m[len(m)-redisstore.TenantSuffixLen:], "\x00t") &&
				have(churnTags()[redisstore.TenantTag(m)]) {
				held++
			}
		}
		if held == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("%s after the tenants left, the key still holds %d members of theirs", within, held)
}

// Tenants that come and go leave nothing behind in the process, nor in
// Redis: 700 tenants make two calls each beside a flood of another
// tenant's, near the limit, where the shares are learned and tenants
// capped; once they have left, with the flood going on, neither replica's
// fair order nor what it knows of the shares (any map of
// core.TenantShares) holds any of them, and the key holds no member of
// theirs once the trim has passed them (a window and its slack). Waits on
// conditions, not on time.
func TestTenantChurnLeavesNoState(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ths, rec, stopFlood := floodedReplicas(t, dial, key)
		defer stopFlood()
		churn(t, ths, 0, 700, 8, 0)
		awaitNoState(t, ths, isChurn, 10*time.Second, "near the limit")
		awaitNoMembers(t, dial, key, isChurn, 10*time.Second)
		stopFlood()
		assertWindow(t, rec.scores(), churnInterval+ths[0].opt.buffer, churnLimit)
	})
}

// Far from the limit, the same: a flood's calls near the limit have the
// shares learned first; then the flood stops, and 300 tenants come and
// go, two calls each, one tenant at a time, beside a light tenant's calls
// on both replicas (which start each replica's fair order afresh): once
// they have left, neither replica holds anything of theirs. Waits on
// conditions, not on time.
func TestTenantChurnFarFromTheLimitLeavesNoState(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		ths, rec, stopFlood := floodedReplicas(t, dial, key)
		defer stopFlood()
		for _, th := range ths {
			waitLocked(t, th, 10*time.Second, "no scan of the tenants near the limit", func() bool { return !th.upkeep.scan.IsZero() })
		}
		stopFlood()

		var wg sync.WaitGroup
		light, stop := context.WithCancel(context.Background())
		defer stop()
		wg.Go(func() {
			tctx := ContextWithTenant(light, "light")
			for i := 0; light.Err() == nil; i++ {
				_ = ths[i%len(ths)].Wait(tctx)
				time.Sleep(20 * time.Millisecond)
			}
		})
		churn(t, ths, 0, 300, 1, 10*time.Millisecond)
		awaitNoState(t, ths, isChurn, 10*time.Second, "far from the limit")
		stop()
		wg.Wait()
		assertWindow(t, rec.scores(), churnInterval+ths[0].opt.buffer, churnLimit)
	})
}
