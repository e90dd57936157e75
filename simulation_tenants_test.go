package throttler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/go-throttler/throttler/internal/sim"
)

// Tenants in the simulation (sim.Tenant): the replicas' own callers call
// for the steady tenants, and a flood's or a light tenant's callers are
// added to them; every call's tenant rides on its context, and every call
// of a tenant is logged (sim.TenantLog) for the shares check.

// simWho is who a caller is: caller g of its replica's own, or a caller of
// an added tenant's (extra).
type simWho struct {
	g     int
	extra *sim.Tenant
}

// tenantOption is the option that weighs the scenario's tenants, if it
// sets weights.
func (w *simWorld) tenantOptions() []Option {
	if !w.sc.Weighted() {
		return nil
	}
	return []Option{WithTenantWeight(w.sc.TenantWeight)}
}

// tenantNames maps the tag of each of sc's tenants (see
// redisstore.TenantTag) to its name.
func tenantNames(sc sim.Scenario) map[string]string {
	names := make(map[string]string, len(sc.Tenants))
	for _, t := range sc.Tenants {
		names[redisstore.TenantTag(redisstore.TenantSuffix(t.Name, sc.TenantWeight(t.Name)))] = t.Name
	}
	return names
}

// tenantNote names, for the trace, the tenant whose mark member ends in
// (see redisstore.TenantSuffix), and whether the call waited behind
// others of its tenant: "" for a call of no tenant.
func (w *simWorld) tenantNote(member string) string {
	n := redisstore.TenantSuffixLen
	if len(member) < n || member[len(member)-n:len(member)-n+2] != "\x00t" {
		return ""
	}
	mark := member[len(member)-n:]
	name, ok := w.names[redisstore.TenantTag(mark)]
	if !ok {
		name = "?"
	}
	if mark == redisstore.TenantWaited(mark, true) {
		return " for " + name + " (waited)"
	}
	return " for " + name
}

// startTenants starts the callers of the flood's and the light tenant's
// on r's replica, numbered after its own; each draws from a source of its
// own, so that the replicas' own callers' draws stay.
func (w *simWorld) startTenants(r *simReplica) {
	g := w.sc.Goroutines
	for i := range w.sc.Tenants {
		t := &w.sc.Tenants[i]
		if t.Steady() || !slices.Contains(t.On, r.link) {
			continue
		}
		for range t.Callers {
			rng := rand.New(rand.NewPCG(w.sc.Seed, 0x74656e<<24|uint64(r.id*1000+g)))
			who := simWho{g: g, extra: t}
			w.wg.Go(func() { w.caller(r, rng, simViaWait, who) })
			g++
		}
	}
}

// tenantOf is the tenant who calls for now ("" without tenants).
func (w *simWorld) tenantOf(r *simReplica, who simWho) string {
	if who.extra != nil {
		return who.extra.Name
	}
	return w.sc.TenantOf(r.link, who.g, w.rec.Since())
}

// tenantArrives waits until who's tenant starts calling, and reports
// whether it does before the traffic ends.
func (w *simWorld) tenantArrives(who simWho) bool {
	return who.extra == nil || w.sleepOrStop(who.extra.From-w.rec.Since())
}

// sleepOrStop sleeps for d, and reports whether the traffic went on
// meanwhile.
func (w *simWorld) sleepOrStop(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.stop:
		return false
	}
}

// tenantLeft reports whether who's tenant has stopped calling.
func (w *simWorld) tenantLeft(who simWho) bool {
	return who.extra != nil && who.extra.To > 0 && w.rec.Since() >= who.extra.To
}

// tenantPause has a light tenant's caller pause between calls, and reports
// whether it calls again (the traffic did not end meanwhile).
func (w *simWorld) tenantPause(who simWho, rng *rand.Rand) bool {
	return who.extra == nil || who.extra.Pace == 0 || w.sleepOrStop(time.Duration(rng.Int64N(int64(2*who.extra.Pace)+1)))
}

// tenantCall logs a call of tenant's that began at start and returned now.
// A killed process's callers are gone: what they see is no one's.
func (w *simWorld) tenantCall(r *simReplica, tenant string, start time.Duration, n int, admitted bool) {
	if tenant == "" || r.dead.Load() {
		return
	}
	w.tl.Add(sim.TenantCall{Replica: r.id, Tenant: tenant, Start: start, End: w.rec.Since(), N: n, Admitted: admitted})
}

// simShareFraction is the least share of its fair share a backlogged
// tenant must get in a stretch (see shareCheck).
const simShareFraction = 1.0 / 3

// shareCheck is the shares check of the run, and the stretches it judges:
// none where the shares are not promised or cannot be judged (see
// sharesJudged).
func (w *simWorld) shareCheck() (sim.ShareCheck, []sim.Span) {
	sc := w.sc
	scan := w.reps[0].th.scanEvery()
	ahead := w.reps[0].th.rules.Ahead
	c := sim.ShareCheck{Weight: sc.TenantWeight, Fraction: simShareFraction, Slack: 2 * sc.MaxN,
		Settle:    sc.W() + ahead + 2*scan,
		LightWait: w.lightWait()}
	if !w.sharesJudged() {
		return c, nil
	}
	return c, sc.Stretches(w.startCost(), c.Settle, sc.W())
}

// sharesJudged reports a run whose tenants' shares the check judges: a
// calm one (no fault but a fleet's cold start, no deadline, no think
// time), of one limit, whose windows are at least 200ms long (the shares
// are learned every tenth of the window and kept for two windows), with calls of one
// priority, no cap in flight (which may bind instead of the limit), no
// settling (which gives units back), and a first window kept as a log
// (a compacted window's older calls are not counted by tenant).
func (w *simWorld) sharesJudged() bool {
	sc := w.sc
	compacted := slices.ContainsFunc(sc.CompactFrom, func(n int) bool { return n > 0 && n <= sc.Limits[0].Limit })
	return len(sc.Tenants) > 0 && sc.Calm() && len(sc.Limits) == 1 && sc.W() >= 200*time.Millisecond &&
		!sc.Priorities && sc.InFlight == 0 && sc.Settle == 0 && !compacted
}

// lightWait bounds a light tenant's wait: what its own and the other light
// tenants' calls take at the limit, first come first served (each has at
// most sim.LightMost waiting), a window for a slot to free, reserve-ahead
// (a flood's claims ahead before its cap) and two scans.
func (w *simWorld) lightWait() time.Duration {
	sc := w.sc
	light := 0
	for _, t := range sc.Tenants {
		if !t.Flood {
			light++
		}
	}
	windows := (3*light*sim.LightMost*sc.MaxN + 2*sc.Limits[0].Limit - 1) / (2 * sc.Limits[0].Limit)
	return time.Duration(windows+2)*sc.W() + w.reps[0].th.rules.Ahead + 2*w.reps[0].th.scanEvery()
}

// checkTenants judges the tenants' shares (see sim.ShareCheck).
func (w *simWorld) checkTenants() {
	if len(w.sc.Tenants) == 0 {
		return
	}
	c, stretches := w.shareCheck()
	_, broken := c.Judge(w.tl.Calls(), stretches)
	for _, b := range broken {
		w.t.Errorf("tenants' shares, seed %d: %s", w.sc.Seed, b)
	}
}

// tenantSummary is the tenants' part of a run's summary: each one's units
// admitted, and its shares in each stretch the check judged.
func (w *simWorld) tenantSummary() string {
	if len(w.sc.Tenants) == 0 {
		return ""
	}
	calls := w.tl.Calls()
	c, stretches := w.shareCheck()
	read, _ := c.Judge(calls, stretches)
	var b strings.Builder
	fmt.Fprintf(&b, "\ntenants: admitted units %s; shares judged in %d stretches", sim.Totals(calls), len(read))
	if !w.sharesJudged() {
		b.WriteString(" (not a run whose shares are judged: see sharesJudged)")
	}
	for _, r := range read {
		fmt.Fprintf(&b, "\n  %s", r)
	}
	return b.String()
}

// withoutTenantCaps runs fn with the tenants' rider out of every round
// (tenants.go's caps across replicas, and the flags it sets on waiting
// calls): a planted bug for the shares check's test. Not with other
// tests running: roundRiders is the package's.
func withoutTenantCaps(fn func()) {
	saved := roundRiders
	roundRiders = slices.DeleteFunc(slices.Clone(roundRiders), func(r rider) bool { _, ok := r.(tenantRider); return ok })
	defer func() { roundRiders = saved }()
	fn()
}

// tenantCallers is how many callers the flood and the light tenant add to
// the replicas' own.
func (w *simWorld) tenantCallers() int {
	n := 0
	for _, t := range w.sc.Tenants {
		n += t.Callers * len(t.On)
	}
	return n
}

// tenantWindows bounds, in windows of capacity units, how long a call of
// a tenant waits behind its own tenant's: served in a fair order, a
// tenant's calls are admitted at its share of the capacity (by weight,
// among every tenant of the run; less the spare the caps leave, spareOf
// of the first limit, and a unit per tenant that a cap rounds off), not
// first come first served.
// As maxWait's first-come bound, half as many windows again.
func (w *simWorld) tenantWindows(capacity int) int {
	sc := w.sc
	if len(sc.Tenants) == 0 {
		return 0
	}
	callers := map[string]int{}
	var weights float64
	for _, t := range sc.Tenants {
		weights += sc.TenantWeight(t.Name)
		callers[t.Name] += t.Callers * len(t.On)
	}
	for r := range sc.Replicas {
		for g := range sc.Goroutines {
			// Its own tenant, and the first while its own is away.
			own := sc.TenantOf(r, g, sc.Run/2)
			for _, at := range []time.Duration{0, sc.Run / 2, sc.Run - 1} {
				if name := sc.TenantOf(r, g, at); name != own {
					callers[name]++
				}
			}
			callers[own]++
		}
	}
	rate := max(1, (1-spareOf(sc.Limits[0].Limit))*float64(capacity)-float64(len(sc.Tenants)))
	most := 0
	for name, n := range callers {
		queued := float64(n*sc.MaxN) * weights / sc.TenantWeight(name)
		most = max(most, int(math.Ceil(1.5*queued/rate)))
	}
	return most
}

// tenantShortfall is what the tenants' caps may leave unused of a calm
// run's quota: the share they leave spare (spareOf: 2%, and at least 5
// units within 5%), per tenant a unit that its cap rounds off and up
// to a call's units less one that its cap cannot fit, and what the light
// tenants held at their most over what they held on average (the caps
// leave them their most lately: sim.LightSwing; see tenants.go).
// Seed 344 (a limit of 25, so a spare of 5%) used 0.7697 against 0.7711
// while this counted the spare as 2%, as it was before 5 units; seed 580
// (light calls of up to 82 units) used 0.8202 against 0.8467 while this
// did not count the light tenants' swing.
func (w *simWorld) tenantShortfall() float64 {
	sc := w.sc
	if len(sc.Tenants) == 0 {
		return 0
	}
	swing := sim.LightSwing(w.tl.Calls(), sc.W())
	return spareOf(sc.MinLimit()) + float64(len(sc.Tenants)*sc.MaxN+swing)/float64(sc.MinLimit())
}

// simSkewedTenants is a calm world for the shares check's test: 12
// replicas of 4 callers on 60 per second, whose callers call for t0 on 11
// of them and for t1 on the twelfth. Both are backlogged, so each is owed
// half the limit, until t1's callers have made their budget of calls
// (simWorld.budget: 67 each, four times an even share of the run among
// the 48 callers, where t1's are owed six times it): with the caps, t1
// got 28 of the 56 units admitted each second until about 9.5s, then
// its callers stopped, and the check takes it as intermittent, t0 being
// owed the rest (so the 177-213 units of 513 the "with the caps" line
// shows). (On 8 replicas, t1 got 52-75 units of its 270 with the caps
// planted out, in 12 race runs, and once 93 in a CI run, over the third
// of its share less 2 the check allows.)
func simSkewedTenants() sim.Scenario {
	const replicas = 12
	on := make([]int, replicas-1)
	for i := range on {
		on[i] = i + 1
	}
	return sim.Scenario{Seed: 1, Replicas: replicas, Goroutines: 4, Ahead: -1,
		Limits: []sim.Limit{{Key: "{sim}:a", Limit: 60, Interval: time.Second}}, Buffer: 50 * time.Millisecond,
		CtxClient: make([]bool, replicas), Skew: make([]time.Duration, replicas), Run: 12 * time.Second, MaxN: 1,
		Tenants: []sim.Tenant{{Name: "t0", On: on}, {Name: "t1", On: []int{0}}}}
}

// simTenantShares runs sc and returns what the shares check reads and
// reports, failing t if a safety check fails.
func simTenantShares(t *testing.T, sc sim.Scenario) (read []sim.Shares, broken []string) {
	synctest.Test(t, func(t *testing.T) {
		w := newSimWorld(t, sc)
		defer w.close()
		w.run()
		w.checkSafety()
		adms := w.rec.Admissions()
		u, _ := w.utilization(adms)
		t.Logf("utilization %.4f (the limits allow %.4f)", u, w.bestUtilization(adms[0].At))
		c, stretches := w.shareCheck()
		read, broken = c.Judge(w.tl.Calls(), stretches)
	})
	return read, broken
}

// The shares check holds a run to the tenants' fair shares: with the
// caps across replicas planted out (the tenants' rider taken out of the
// round: each process serves its tenants fairly, but no one holds t0, on
// eleven replicas, to its share), t1, on one, gets about a sixth of its
// share (a twelfth of the limit), and the check reports it; with them, it
// passes. Not parallel:
// the plant changes the package's riders.
func TestSimulationSharesCheckFindsAPlantedBug(t *testing.T) {
	sc := simSkewedTenants()
	read, broken := simTenantShares(t, sc)
	t.Logf("with the caps: %v", read)
	if len(read) == 0 {
		t.Fatalf("no stretch judged in %s", sc)
	}
	for _, b := range broken {
		t.Errorf("the library as it is: %s", b)
	}
	withoutTenantCaps(func() { read, broken = simTenantShares(t, sc) })
	t.Logf("without: %v", read)
	if !slices.ContainsFunc(broken, func(b string) bool { return strings.HasPrefix(b, "tenant t1, backlogged") }) {
		t.Errorf("the caps planted out, the check reported no short share of t1's: %q", broken)
	}
}
