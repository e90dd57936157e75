package redisstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The scan counts each tenant's calls after its from, how many of them
// waited, and the light tenants' most in any window; the scores read
// each capped tenant's members; members without a mark count for no
// tenant, as the calls of none (a use tagged "").
func TestTenantScripts(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		ctx := context.Background()
		a, b := TenantSuffix("tenant-a", 2), TenantSuffix("tenant-b", 1)
		aw := TenantWaited(a, true)
		members := []redis.Z{
			{Score: 600, Member: "p\x01" + aw},      // before from, within a window of it: a's, waited
			{Score: 900, Member: "p\x02" + b},       // before from: b's, in the light peak's reach
			{Score: 1000, Member: "p\x03" + b},      // b's
			{Score: 1050, Member: "p\x04" + b},      // b's
			{Score: 1100, Member: "p\x05" + aw},     // a's
			{Score: 1200, Member: "p\x06" + a},      // a's, not waited
			{Score: 1300, Member: "untenanted\x07"}, // no one's
		}
		if err := c.ZAdd(ctx, "k", members...).Err(); err != nil {
			t.Fatal(err)
		}
		vals, err := TenantScript.Run(ctx, c, []string{"k"}, 950, 500).Slice()
		if err != nil {
			t.Fatal(err)
		}
		var r core.Reply
		if err := parseTenants(&r, vals); err != nil {
			t.Fatal(err)
		}
		// b's calls at 900, 1000 and 1050 lie in one window of 500.
		if r.LightPeak != 3 {
			t.Errorf("light peak %d, want 3", r.LightPeak)
		}
		got := map[string]core.TenantUse{}
		for _, u := range r.Tenants {
			got[u.Tag] = u
		}
		if u := got[TenantTag(a)]; u.Units != 2 || u.Waited != 2 || u.Weight != 2 {
			t.Errorf("a: %+v, want 2 units, 2 waited (one before from), weight 2", u)
		}
		if u := got[TenantTag(b)]; u.Units != 2 || u.Waited != 0 || u.Weight != 1 || len(got) != 3 {
			t.Errorf("b: %+v of %d uses, want 2 units, none waited, weight 1, of 3", u, len(got))
		}
		if u := got[""]; u.Units != 1 || u.Waited != 0 {
			t.Errorf("no one's: %+v, want 1 unit", u)
		}
		caps := []core.TenantCap{{Tag: TenantTag(a), From: 1000}, {Tag: TenantTag(b), From: 0}}
		vals, err = TenantScoresScript.Run(ctx, c, []string{"k"}, 0, caps[0].Tag, caps[1].Tag).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if err := parseTenantScores(&r, vals, caps); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.CapsScores[0], []int64{1100, 1200}) || !slices.Equal(r.CapsScores[1], []int64{900, 1000, 1050}) {
			t.Errorf("scores %v, want a's after 1000 and all of b's", r.CapsScores)
		}
	})
}

// Under one limit, an exact attempt reads its scores' peaks only while a
// tenant is held to a cap (core.TenantAsk.Peaks): a claim now beside a
// capped tenant's claims ahead is counted against the fullest window that
// holds it, not against its neighbourhood, which holds both the last
// window's calls and those ahead.
func TestTenantPeaksUnderOneLimit(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		ctx := context.Background()
		const w = 100
		key := redistest.Key(t, "tenant-peaks")
		// 3 calls in the last window, 3 reserved ahead: a neighbourhood of 6,
		// and no window of 100 that holds 1000 holds more than 3.
		for i, s := range []int64{905, 910, 990, 1050, 1060, 1095} {
			if err := c.ZAdd(ctx, key, redis.Z{Score: float64(s), Member: fmt.Sprint("o", i)}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		win := core.Window{Key: key, Limit: 5, Interval: w * time.Microsecond, W: w}
		for _, peaks := range []bool{false, true} {
			a := &core.Attempt{Exact: true, Lims: []int{5}, Checks: []int64{1000},
				Adds: []core.Entry{{Score: 1000, Member: fmt.Sprint("ours", peaks)}}}
			a.Tenants.Peaks = peaks
			r, err := NewStore(c, []core.Window{win}, 0, nil, "self").Reserve(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case !peaks && r.Peaks != nil:
				t.Errorf("without a capped tenant: peaks %v read, want none", r.Peaks)
			case peaks && (r.Peaks == nil || r.Peaks[0][0] != 3):
				t.Errorf("with a capped tenant: peaks %v, want 3 at 1000 (count %v)", r.Peaks, r.Counts)
			}
			if err := c.ZRem(ctx, key, a.Adds[0].Member).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
