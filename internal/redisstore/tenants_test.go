package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
			{Score: 1100, Member: "q\x05" + aw},     // a's, of another process
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
		if u := got[TenantTag(a)]; u.Units != 2 || u.Waited != 2 || u.Weight != 2 || u.First != 1100 || u.Last != 1200 {
			t.Errorf("a: %+v, want 2 units, 2 waited (one before from), weight 2, the oldest after from at 1100, the newest at 1200", u)
		}
		if u := got[TenantTag(b)]; u.Units != 2 || u.Waited != 0 || u.Weight != 1 || u.First != 1000 || u.Last != 1050 || len(got) != 3 {
			t.Errorf("b: %+v of %d uses, want 2 units, none waited, weight 1, the oldest after from at 1000, the newest at 1050, of 3", u, len(got))
		}
		if u := got[""]; u.Units != 1 || u.Waited != 0 {
			t.Errorf("no one's: %+v, want 1 unit", u)
		}
		caps := []core.TenantCap{{Tag: TenantTag(a), Cap: 5, From: 1000}, {Tag: TenantTag(b), Cap: 5, From: 0}}
		vals, err = TenantScoresScript.Run(ctx, c, []string{"k"}, 0, 500, 1, "p", 2, caps[0].Tag, 5, 0, caps[1].Tag, 5, 0).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if err := parseTenantScores(&r, vals, caps, true); err != nil {
			t.Fatal(err)
		}
		if m := r.Caps[0].Members; !slices.Equal(m.Own, []int64{1200}) || !slices.Equal(m.Others, []int64{1100}) || m.Procs != 2 || m.After != 1000 {
			t.Errorf("a's members %+v, want those after 1000 (After): 1200 its own (prefix p), 1100 another's (q), of 2 processes", m)
		}
		if m := r.Caps[1].Members; !slices.Equal(m.Own, []int64{900, 1000, 1050}) || len(m.Others) != 0 || m.Procs != 1 {
			t.Errorf("b's members %+v, want all of them, its own, of 1 process", m)
		}
	})
}

// A process's debt (a Settle's excess, core.DebtPrefix before its
// prefix) is its own, as its calls are: it holds the room its process
// reuses, and counts no other process.
func TestTenantScoresOwnDebt(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		ctx := context.Background()
		a := TenantSuffix("tenant-a", 1)
		key := redistest.Key(t, "tenant-debt")
		if err := c.ZAdd(ctx, key,
			redis.Z{Score: 1100, Member: "p\x01" + a},
			redis.Z{Score: 1150, Member: core.DebtPrefix + "p\x02" + a},
			redis.Z{Score: 1200, Member: "q\x03" + a},
			redis.Z{Score: 1250, Member: core.DebtPrefix + "q\x04" + a}).Err(); err != nil {
			t.Fatal(err)
		}
		caps := []core.TenantCap{{Tag: TenantTag(a), Cap: 5}}
		vals, err := TenantScoresScript.Run(ctx, c, []string{key}, 0, 500, 1, "p", 1, caps[0].Tag, 5, 0).Slice()
		if err != nil {
			t.Fatal(err)
		}
		var r core.Reply
		if err := parseTenantScores(&r, vals, caps, true); err != nil {
			t.Fatal(err)
		}
		if m := r.Caps[0].Members; !slices.Equal(m.Own, []int64{1100, 1150}) || !slices.Equal(m.Others, []int64{1200, 1250}) || m.Procs != 2 {
			t.Errorf("a's members %+v, want 1100 and its debt at 1150 p's own, 1200 and its debt at 1250 q's, of 2 processes", m)
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

// The store checks a capped tenant's claims against its cap in order,
// with the first key's other members and the claims before them that it
// kept, and removes those the cap does not hold at once, and every claim
// of the tenant behind a refused one, which would otherwise go ahead of
// it: they count for nothing after for the claims behind them. The round's counts hold them
// still, as they hold every claim of the round (core.Resolve takes the
// round's own out of them).
func TestTenantCapsRefusedInTheStore(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		ctx := context.Background()
		const w = 100
		a := TenantSuffix("tenant-a", 1)
		win := core.Window{Key: redistest.Key(t, "tenant-caps"), Limit: 100, Interval: w * time.Microsecond, W: w}
		var tails [2][]string // by peaks: the tenant's members in the tails read
		for pi, peaks := range []bool{false, true} {
			key := win.Key
			c.Del(ctx, key)
			for i, s := range []int64{900, 950, 990} {
				if err := c.ZAdd(ctx, key, redis.Z{Score: float64(s), Member: fmt.Sprint("q", i, a)}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// Claims in order: 1000 fits (950, 990, 1000 in (900, 1000]);
			// a second at 1000 does not; 2 units at 1060 do not, beside
			// 990 and 1000; 1095 would, with those 2 gone, but a claim
			// behind a refused one of its tenant is refused too.
			scores, units := []int64{1000, 1000, 1060, 1095}, []int{1, 1, 2, 1}
			// A limit of 8 has the tails (the last 8 members and the
			// attempt's 6) hold them all.
			at := &core.Attempt{Exact: true, Lims: []int{8}, Learn: core.Learning{Slots: 8}}
			cp := core.TenantCap{Tag: TenantTag(a), Cap: 3, From: 850}
			for i, g := range scores {
				cp.Claims = append(cp.Claims, core.CapClaim{Claim: i, First: len(at.Adds), N: units[i]})
				for j := range units[i] {
					at.Adds = append(at.Adds, core.Entry{Score: g, Member: fmt.Sprint("p", i, j, a)})
				}
				if !slices.Contains(at.Checks, g) {
					at.Checks = append(at.Checks, g)
				}
			}
			// The round scans too: in TenantPeakScript with peaks, after
			// the refused claims left, as TenantScript after it would; from
			// 800 on, before the caps' reads (850), which it widens.
			at.Tenants = core.TenantAsk{Peaks: peaks, Caps: []core.TenantCap{cp}, Own: "p", Scan: true, From: 900, W: w}
			r, err := NewStore(c, []core.Window{win}, 0, nil, "self").Reserve(ctx, at)
			if err != nil {
				t.Fatal(err)
			}
			checkScan(t, c, key, at.Tenants, r)
			if len(r.Caps) != 1 {
				t.Fatalf("peaks %v: %d caps read, want 1", peaks, len(r.Caps))
			}
			cr := r.Caps[0]
			if !slices.Equal(cr.Refused, []int{1, 2, 3}) || !cr.Removed {
				t.Errorf("peaks %v: refused %v (removed %v), want the 2nd, 3rd and 4th claims, removed", peaks, cr.Refused, cr.Removed)
			}
			if m := cr.Members; !slices.Equal(m.Own, []int64{1000}) || !slices.Equal(m.Others, []int64{900, 950, 990}) || m.Procs != 2 {
				t.Errorf("peaks %v: members %+v, want its own 1000, the others' 900, 950, 990, of 2 processes", peaks, m)
			}
			left, err := c.ZRange(ctx, key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"p10", "p20", "p21", "p30"} {
				if slices.Contains(left, m+a) {
					t.Errorf("peaks %v: refused member %s still in the key", peaks, m)
				}
			}
			if n := len(slices.DeleteFunc(left, func(m string) bool { return !strings.HasSuffix(m, a) })); n != 4 {
				t.Errorf("peaks %v: %d of the tenant's members left, want 4: the others' 3 and the claim kept", peaks, n)
			}
			for _, e := range r.Tails[0] {
				if strings.HasSuffix(e.Member, a) {
					tails[pi] = append(tails[pi], e.Member)
				}
			}
			// (960, 1160) holds 990, 1000, 1095 and the 3 refused at 1000 and 1060.
			if i := slices.Index(at.Checks, 1060); r.Counts[0][i] != 6 {
				t.Errorf("peaks %v: count at 1060 is %d, want 6, with the round's claims refused", peaks, r.Counts[0][i])
			}
		}
		// The tails hold the claims refused, as the counts do, whether the
		// script that refused them ran before the tails were read or after.
		if len(tails[0]) != 8 || !slices.Equal(tails[0], tails[1]) {
			t.Errorf("the tenant's members in the tails: %v without peaks, %v with; want the same 8", tails[0], tails[1])
		}
	})
}

// The claims a round refuses leave the key in one ZREM per 1,000
// members, whatever the number of tenants and claims refused: a round
// under a flood refuses many, and each command counts at the server.
// Tenant a's second claim is refused (its cap is 1) and its third, of
// 1,500 units, behind it; tenant b's second claim is refused too.
func TestTenantRefusalsRemovedTogether(t *testing.T) {
	c := redistest.Start(t).NewClient()
	ctx := context.Background()
	const w = 100
	win := core.Window{Key: redistest.Key(t, "tenant-refusals"), Limit: 5000, Interval: w * time.Microsecond, W: w}
	at := &core.Attempt{Exact: true, Lims: []int{5000}}
	var refused []string
	for ti, units := range [][]int{{1, 1, 1500}, {1, 1}} {
		suffix := TenantSuffix(fmt.Sprint("tenant-", ti), 1)
		cp := core.TenantCap{Tag: TenantTag(suffix), Cap: 1, From: 900}
		for ci, n := range units {
			cp.Claims = append(cp.Claims, core.CapClaim{Claim: ci, First: len(at.Adds), N: n})
			for j := range n {
				m := fmt.Sprint("p", ti, "-", ci, "-", j, suffix)
				at.Adds = append(at.Adds, core.Entry{Score: 1000, Member: m})
				if ci > 0 {
					refused = append(refused, m)
				}
			}
		}
		at.Tenants.Caps = append(at.Tenants.Caps, cp)
	}
	at.Checks = []int64{1000}
	at.Tenants.Own = "p"
	zrems := func() int {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_zrem:calls="); ok {
				var n int
				fmt.Sscan(strings.SplitN(rest, ",", 2)[0], &n)
				return n
			}
		}
		return 0
	}
	before := zrems()
	r, err := NewStore(c, []core.Window{win}, 0, nil, "self").Reserve(ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	if n := zrems() - before; n != 2 {
		t.Errorf("the round sent %d ZREMs, want 2 for %d members refused", n, len(refused))
	}
	if len(r.Caps) != 2 || !slices.Equal(r.Caps[0].Refused, []int{1, 2}) || !slices.Equal(r.Caps[1].Refused, []int{1}) {
		t.Fatalf("refused %+v, want tenant 0's claims 2 and 3, tenant 1's claim 2", r.Caps)
	}
	left, err := c.ZCard(ctx, win.Key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(at.Adds) - len(refused) + 1); left != want { // + the marker
		t.Errorf("%d members left, want %d: the claims kept and the marker", left, want)
	}
}

// The script's check of a capped tenant's claims agrees with
// core.CapHolds, claim by claim in order, on random members and claims,
// every claim behind a refused one refused: the same claims refused, and
// the same members left.
func TestTenantCapsAgreeWithCapHolds(t *testing.T) {
	onBothServers(t, func(t *testing.T, c *redis.Client, _ *miniredis.Miniredis) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(7, 43))
		const w = 100
		a := TenantSuffix("tenant-a", 1)
		key := redistest.Key(t, "tenant-caps-model")
		for iter := range 200 {
			c.Del(ctx, key)
			var list []int64 // the tenant's members as the model holds them
			for i := range rng.IntN(12) {
				s := 900 + int64(rng.IntN(250))
				owner := []string{"p", "q", "r"}[rng.IntN(3)]
				if err := c.ZAdd(ctx, key, redis.Z{Score: float64(s), Member: fmt.Sprint(owner, "m", i, a)}).Err(); err != nil {
					t.Fatal(err)
				}
				list = append(list, s)
			}
			drop := iter % 2 // the claims refused leave the key, or stay for the process to give back
			cp, args := 1+rng.IntN(5), []any{800, w, drop, "p", 1, TenantTag(a)}
			type claim struct {
				g int64
				n int
			}
			var claims []claim
			var claimArgs []any
			for i := range 1 + rng.IntN(6) {
				cl := claim{1000 + int64(rng.IntN(150)), 1 + rng.IntN(3)}
				claims = append(claims, cl)
				claimArgs = append(claimArgs, cl.n)
				for j := range cl.n {
					m := fmt.Sprint("p", "c", i, "-", j, a)
					if err := c.ZAdd(ctx, key, redis.Z{Score: float64(cl.g), Member: m}).Err(); err != nil {
						t.Fatal(err)
					}
					claimArgs = append(claimArgs, m)
				}
			}
			args = append(args, cp, len(claims))
			args = append(args, claimArgs...)
			vals, err := TenantScoresScript.Run(ctx, c, []string{key}, args...).Slice()
			if err != nil {
				t.Fatal(err)
			}
			var r core.Reply
			caps := []core.TenantCap{{Tag: TenantTag(a), Cap: cp, From: 800, Claims: make([]core.CapClaim, len(claims))}}
			if err := parseTenantScores(&r, vals, caps, true); err != nil {
				t.Fatal(err)
			}
			var refused []int
			for i, cl := range claims {
				with := slices.Sorted(slices.Values(append(slices.Clone(list), slices.Repeat([]int64{cl.g}, cl.n)...)))
				if len(refused) == 0 && core.CapHolds(with, cl.g, w, max(cp, cl.n)) {
					list = with
				} else {
					refused = append(refused, i)
				}
			}
			slices.Sort(list)
			if got := r.Caps[0]; !slices.Equal(got.Refused, refused) || !slices.Equal(got.Members.All(), list) {
				t.Fatalf("iter %d, cap %d, claims %v: refused %v, members %v; the model refuses %v, leaves %v", iter, cp, claims, got.Refused, got.Members.All(), refused, list)
			}
			want := len(list)
			if drop == 0 {
				for _, i := range refused {
					want += claims[i].n
				}
			}
			if n, err := c.ZCard(ctx, key).Result(); err != nil || int(n) != want {
				t.Fatalf("iter %d (drop %d): %d members in the key (%v), want %d", iter, drop, n, err, want)
			}
		}
	})
}

// checkScan checks the scan a round read, r's tenants and light peak,
// against TenantScript's run after the round on key, with the scan's
// From and W in ask.
func checkScan(t *testing.T, c *redis.Client, key string, ask core.TenantAsk, r core.Reply) {
	t.Helper()
	vals, err := TenantScript.Run(context.Background(), c, []string{key}, ask.From, ask.W).Slice()
	if err != nil {
		t.Fatal(err)
	}
	var want core.Reply
	if err := parseTenants(&want, vals); err != nil {
		t.Fatal(err)
	}
	if len(r.Tenants) == 0 && len(want.Tenants) == 0 {
		r.Tenants, want.Tenants = nil, nil
	}
	if !slices.Equal(r.Tenants, want.Tenants) || r.LightPeak != want.LightPeak {
		t.Fatalf("the round's scan read %+v (light peak %d), TenantScript after it %+v (%d)", r.Tenants, r.LightPeak, want.Tenants, want.LightPeak)
	}
}
