package redisstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkTenantCapCheck times TenantScoresScript's cap check on
// redis-server as a flood's round trip makes it (issue 43's flood: a key
// of 100/s, one tenant capped near the whole limit): the key holds two
// windows of the capped tenant's calls at its cap (88 in every window of
// 1s, spread evenly over 3 processes) and a light tenant's calls
// besides; the round claims `claims` slots, one call each, at the
// frontier, each of which its cap holds, so none is refused and the key
// does not change from one run to the next; the script reads from the
// first claim's score less the window, as the throttler asks. It reports the script's wall
// time per run (the reply's trip included) and per claim checked.
func BenchmarkTenantCapCheck(b *testing.B) {
	for _, claims := range []int{1, 10, 30} {
		b.Run(fmt.Sprint(claims, "-claims"), func(b *testing.B) {
			ctx := context.Background()
			c := redistest.Start(b).NewClient()
			key := redistest.Key(b, "tenant-cap-bench")
			const (
				w     = 1_000_000 // µs
				cp    = 88
				apart = w/cp + 1 // 88 in every window, not 89
				base  = 10_000_000
			)
			flood, light := TenantSuffix("flood", 1), TenantSuffix("light", 1)
			var zs []redis.Z
			var score int64 = base
			for i := range 2 * cp {
				zs = append(zs, redis.Z{Score: float64(score), Member: fmt.Sprintf("%c-%04d%s", 'p'+i%3, i, flood)})
				if i%8 == 0 {
					zs = append(zs, redis.Z{Score: float64(score + apart/2), Member: fmt.Sprintf("q-l%04d%s", i, light)})
				}
				score += apart
			}
			// Read from the first claim less w, as the throttler's tenants
			// rider asks (TenantCap.From).
			args := []any{score - w, w, 0, "p", 1, TenantTag(flood), cp, claims}
			for j := range claims {
				m := fmt.Sprintf("p-c%04d%s", j, flood)
				zs = append(zs, redis.Z{Score: float64(score), Member: m})
				args = append(args, 1, m)
				score += apart
			}
			if err := c.Del(ctx, key).Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.ZAdd(ctx, key, zs...).Err(); err != nil {
				b.Fatal(err)
			}
			if err := TenantScoresScript.Load(ctx, c).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				vals, err := TenantScoresScript.Run(ctx, c, []string{key}, args...).Slice()
				if err != nil {
					b.Fatal(err)
				}
				// Every claim holds: the tenant's answer names no refusal.
				if got := vals[0].([]any)[1].(int64); got != 0 {
					b.Fatalf("%d claims refused, want none", got)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/run")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*claims), "ns/claim")
		})
	}
}
