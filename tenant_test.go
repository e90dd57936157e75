package throttler

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// queueOf inserts ws into a fresh queue, in order, and returns the queue's
// tenants, head first.
func queueOf(q *workerState, ws ...*waiter) []string {
	for _, w := range ws {
		q.insert(w)
	}
	var order []string
	for _, w := range q.queue {
		order = append(order, w.rank.tenant)
	}
	return order
}

func tenantWaiters(tenant string, n int) []*waiter {
	ws := make([]*waiter, n)
	for i := range ws {
		ws[i] = &waiter{n: 1, rank: rank{tenant: tenant}}
	}
	return ws
}

// A call of a tenant that joins behind a flood of another's queues second,
// not last; within one tenant, calls keep their order; a priority still
// goes first.
func TestFairOrderPutsALightTenantAheadOfAFlood(t *testing.T) {
	var q workerState
	flood := tenantWaiters("a", 10)
	got := queueOf(&q, append(flood, &waiter{n: 1, rank: rank{tenant: "b"}})...)
	if want := slices.Concat([]string{"a", "b"}, slices.Repeat([]string{"a"}, 9)); !slices.Equal(got, want) {
		t.Fatalf("queue %v, want %v", got, want)
	}
	for i, w := range q.queue[2:] {
		if w != flood[i+1] {
			t.Fatalf("tenant a's calls reordered at %d", i)
		}
	}
	high := &waiter{n: 1, rank: rank{tenant: "c", prio: PriorityHigh}}
	q.insert(high)
	if q.queue[0] != high {
		t.Fatalf("a high priority call queued behind %q's", q.queue[0].rank.tenant)
	}
}

// Served as they join, two flooding tenants alternate; by weight 2:1, the
// heavier is served twice as often; a call of n units counts n.
func TestFairOrderShares(t *testing.T) {
	for _, tc := range []struct {
		name   string
		weight func(string) float64
		nA     int
		wantA  int // of the first 30 served
	}{
		{"equal", nil, 1, 15},
		{"weighted", func(t string) float64 { return map[string]float64{"a": 2}[t] }, 1, 20},
		{"units", nil, 2, 10}, // a's calls take 2 units each: 10 calls, 20 units, against b's 10
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q workerState
			o := orderOptions{weight: tc.weight}
			for range 30 {
				q.insert(&waiter{n: tc.nA, rank: o.rankOf(ContextWithTenant(context.Background(), "a"), PriorityNormal, false)})
				q.insert(&waiter{n: 1, rank: o.rankOf(ContextWithTenant(context.Background(), "b"), PriorityNormal, false)})
			}
			a := 0
			for _, w := range q.queue[:30] {
				if w.rank.tenant == "a" {
					a++
				}
			}
			if d := a - tc.wantA; d < -1 || d > 1 {
				t.Fatalf("%d of the first 30 queued are a's, want %d", a, tc.wantA)
			}
		})
	}
}

// Served as the queue goes, the fair order keeps no tenant it need not: a
// tenant whose calls were all served is forgotten, and an empty queue
// starts afresh.
func TestFairOrderForgetsServedTenants(t *testing.T) {
	var f fairOrder
	n := core.Level(1)
	f.stamp(n, "x", 0, 1, true)
	for i := range 1000 {
		// One call at a time, each served before the next tenant's joins:
		// each tenant's finish tag is passed at once.
		tag := f.stamp(n, string(rune('a'+i%26))+string(rune(i)), 0, 1, false)
		f.served(n, tag+1)
	}
	if l := f.level[n]; len(l.finish) > 40 {
		t.Fatalf("the order keeps %d tenants after 1,000 served one call each", len(l.finish))
	}
	f.stamp(n, "y", 0, 1, true)
	if l := f.level[n]; len(l.finish) != 1 || l.virtual != 0 {
		t.Fatalf("an empty queue left %d tenants at virtual time %g", len(l.finish), l.virtual)
	}
}

// A call whose caller gives up while it is queued is taken back from its
// tenant's charge: a tenant whose 20 queued calls all timed out queues its
// next call second behind another tenant's 20, not last; one that gave up
// a call in the middle of its own is charged for those it kept only.
func TestFairOrderTakesBackCallsGivenUp(t *testing.T) {
	var q workerState
	a, b := tenantWaiters("a", 20), tenantWaiters("b", 20)
	for i := range a {
		q.insert(a[i])
		q.insert(b[i])
	}
	for _, w := range a {
		q.remove(w)
	}
	next := &waiter{n: 1, rank: rank{tenant: "a"}}
	q.insert(next)
	if i := slices.Index(q.queue, next); i != 1 {
		t.Fatalf("a's call after its 20 gave up queued at %d of %d", i, len(q.queue))
	}
	// b gives up its first call: its next still follows its 19 others,
	// and comes at its tag less the call given up.
	q.remove(b[0])
	late := &waiter{n: 1, rank: rank{tenant: "b"}}
	q.insert(late)
	if i := slices.Index(q.queue, late); i != len(q.queue)-1 || late.rank.tag != 19 {
		t.Fatalf("b's next call queued at %d of %d with tag %g, want last with tag 19", i, len(q.queue), late.rank.tag)
	}
}

// A priority none of whose calls is served (a higher priority takes every
// slot) keeps no tenant whose calls all gave up: 100,000 tenants of one
// call each come and give up, and the table stays small.
func TestFairOrderForgetsTenantsThatGaveUp(t *testing.T) {
	var q workerState
	q.insert(&waiter{n: 1, rank: rank{prio: PriorityHigh}}) // the queue never empties
	for i := range 100_000 {
		w := &waiter{n: 1, rank: rank{tenant: strconv.Itoa(i), prio: PriorityLow}}
		q.insert(w)
		q.remove(w)
	}
	if n := len(q.fair.level[PriorityLow.level()].finish); n > 40 {
		t.Fatalf("the order keeps %d tenants after 100,000 gave up their one call", n)
	}
}

// Each priority keeps its own tags: a flooding tenant's high-priority
// call, served ahead of everything, does not move the normal calls'
// virtual time past the flood's queued normal calls, so that a light
// tenant's next normal call still queues ahead of them.
func TestFairOrderPrioritiesKeepTheirOwnTags(t *testing.T) {
	q := workerState{}
	for range 10 {
		q.insert(&waiter{n: 1, rank: rank{prio: PriorityNormal, tenant: "flood"}})
	}
	high := &waiter{n: 1, rank: rank{prio: PriorityHigh, tenant: "flood"}}
	for range 20 {
		q.insert(&waiter{n: 1, rank: rank{prio: PriorityHigh, tenant: "flood"}})
	}
	q.insert(high)
	// Served, the last of the flood's high-priority calls: its tag is far
	// past the flood's queued normal calls' in a single order.
	q.fair.served(high.rank.prio.level(), high.rank.tag)
	light := &waiter{n: 1, rank: rank{prio: PriorityNormal, tenant: "light"}}
	q.insert(light)
	var normal []*waiter
	for _, w := range q.queue {
		if w.rank.prio == PriorityNormal {
			normal = append(normal, w)
		}
	}
	if i := slices.Index(normal, light); i > 1 {
		t.Fatalf("the light tenant's call queues %dth of the normal calls, behind the flood's; want first or second", i+1)
	}
}

// Through Redis, a tenant's call that joins behind a flood of another
// tenant's waiting calls is admitted ahead of them, and the window holds.
func TestTenantServedAheadOfAFlood(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var rec recorder
		const limit, flood = 3, 12
		interval := 300 * time.Millisecond
		th := rec.watch(mustNew(t, dial(), key, limit, interval))
		var mu sync.Mutex
		var order []string
		wait := func(tenant string) {
			if err := th.Wait(ContextWithTenant(context.Background(), tenant)); err != nil {
				t.Error(err)
			}
			mu.Lock()
			order = append(order, tenant)
			mu.Unlock()
		}
		var wg sync.WaitGroup
		for range flood {
			wg.Go(func() { wait("a") })
		}
		queued := func() int {
			th.mu.Lock()
			defer th.mu.Unlock()
			return len(th.worker.queue)
		}
		for deadline := time.Now().Add(5 * time.Second); queued() < flood/2; {
			if time.Now().After(deadline) {
				t.Fatalf("%d calls queued, want %d", queued(), flood/2)
			}
			time.Sleep(time.Millisecond)
		}
		wg.Go(func() { wait("b") })
		wg.Wait()
		// In the order the calls joined, b's would be the last, the 13th;
		// at least 6 of a's were still queued when it joined.
		if i := slices.Index(order, "b"); i < 0 || i >= flood+1-flood/2+1 {
			t.Fatalf("b's call admitted %dth of %d (%v), want ahead of a's queued calls", i+1, len(order), order)
		}
		assertWindow(t, rec.scores(), interval+th.opt.buffer, limit)
	})
}

// A Transport's Tenant names the tenant of requests whose context carries
// none; a context's tenant wins; a Tenant of "" is no tenant.
func TestTransportTenant(t *testing.T) {
	var seen []string
	var mu sync.Mutex
	th := mustNew(t, miniDialer(t, miniredis.RunT(t))(), "quota", 100, time.Second)
	tr := &Transport{
		Route:  th.Route(),
		Tenant: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		Base: rtFunc(func(r *http.Request) (*http.Response, error) {
			tenant, ok := TenantFromContext(r.Context())
			if !ok {
				tenant = "none"
			}
			mu.Lock()
			seen = append(seen, tenant)
			mu.Unlock()
			return okBody(r)
		}),
	}
	c := &http.Client{Transport: tr}
	optOut := ContextWithTenant(ContextWithTenant(context.Background(), "ctx"), "")
	for i, ctx := range []context.Context{context.Background(), ContextWithTenant(context.Background(), "ctx"), context.Background(), optOut} {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.example/x", nil)
		if i != 2 {
			req.Header.Set("X-Tenant", "header")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// The third request has no header: Tenant names "", no tenant. The
	// last has one, but its context was given the empty tenant: no
	// tenant, Tenant not asked.
	if want := []string{"header", "ctx", "none", "none"}; !slices.Equal(seen, want) {
		t.Fatalf("tenants %v, want %v", seen, want)
	}
}

// A queue that empties keeps no tenant in its fair order, whether its
// last waiter left with a slot (keep) or gave up (remove).
func TestFairOrderEmptyQueueKeepsNoTenant(t *testing.T) {
	for _, leave := range []string{"keep", "remove"} {
		q := workerState{}
		w := &waiter{n: 1, rank: rank{tenant: "a"}}
		q.insert(w)
		q.insert(&waiter{n: 1, rank: rank{tenant: "b"}})
		if leave == "keep" {
			q.keep(q.queue[:0])
		} else {
			q.remove(q.queue[1])
			q.remove(w)
		}
		for p, l := range q.fair.level {
			if len(l.finish) != 0 {
				t.Errorf("%s: priority %d keeps tenants %v", leave, p, l.finish)
			}
		}
	}
}

// A tenant's calls stay in the order they joined, across round trips that
// take the whole queue and send some calls back: a call that joins while a
// round trip is out queues behind the calls of its tenant that the round
// trip sends back. (The fair order started afresh whenever a round trip
// took the whole queue; the calls sent back kept their tags, and a later
// call of their tenant, stamped afresh, went ahead of them. Seed 40248: a
// call of 4 units waited 5 windows so.)
func TestFairOrderKeepsTenantOrderAcrossRoundTrips(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q workerState
	joined := map[*waiter]int{}
	for i := range 5000 {
		switch op := rng.IntN(4); {
		case op < 2:
			w := &waiter{n: 1 + rng.IntN(4), rank: rank{prio: PriorityNormal, tenant: []string{"a", "b"}[rng.IntN(2)]}}
			joined[w] = i
			q.insert(w)
		case op == 2 && q.out == 0:
			// A round trip takes the whole queue.
			batch := slices.Clone(q.queue)
			for _, w := range batch {
				q.fair.served(w.rank.prio.level(), w.rank.tag)
			}
			q.out = len(batch)
			q.keep(q.queue[:0])
			// Calls join while it is out; then it sends some back.
			for range rng.IntN(3) {
				w := &waiter{n: 1, rank: rank{prio: PriorityNormal, tenant: []string{"a", "b"}[rng.IntN(2)]}}
				joined[w] = i
				q.insert(w)
			}
			back := slices.DeleteFunc(batch, func(*waiter) bool { return rng.IntN(2) == 0 })
			q.pushFront(back)
			q.landed()
		}
		last := map[string]int{}
		for _, w := range q.queue {
			if j, ok := last[w.rank.tenant]; ok && joined[w] < j {
				t.Fatalf("step %d: tenant %s's call that joined at step %d queues behind one that joined at step %d", i, w.rank.tenant, joined[w], j)
			}
			last[w.rank.tenant] = joined[w]
		}
	}
}

// A tenant whose calls the store refused in the round counts as queued
// (core.TenantUse.Queued), as one with calls in the queue does: they go
// back to it, though the round's scan, which reads after the store
// removed them, no longer counts them. A call of the round that was not
// refused, and the calls of no tenant, count for nothing.
func TestMarkQueuedCountsRefusedCalls(t *testing.T) {
	mk := func(tenant string) *waiter {
		w := &waiter{}
		w.rank.mark = redisstore.TenantSuffix(tenant, 1)
		return w
	}
	a, b, c := mk("a"), mk("b"), mk("c")
	fresh := func() []core.TenantUse {
		return []core.TenantUse{{Units: 3}, {Tag: a.tenantTag()}, {Tag: b.tenantTag()}, {Tag: c.tenantTag()}}
	}
	uses := fresh()
	uses = markQueued(uses, []*waiter{a}, []*waiter{b, c, {}}, []bool{true, false, true})
	for i, want := range []bool{false, true, true, false} {
		if uses[i].Queued != want {
			t.Errorf("use %d (%q): queued %v, want %v", i, uses[i].Tag, uses[i].Queued, want)
		}
	}
	uses = fresh()
	if got := markQueued(uses, nil, []*waiter{b, c}, nil); len(got) != len(uses) {
		t.Errorf("nothing queued or refused: %d uses, want %d", len(got), len(uses))
	}
	for i, u := range uses {
		if u.Queued {
			t.Errorf("use %d (%q) queued with nothing queued or refused", i, u.Tag)
		}
	}
}

// A tenant whose calls are queued here and that the scan did not see (no
// call of its in the window) gets a use of no units, flagged as waited
// when two of its calls are queued: the scan must not take the tenant it
// sees as alone (seed 812). Tenants the scan saw get none added.
func TestMarkQueuedAddsTenantsTheScanDidNotSee(t *testing.T) {
	mk := func(tenant string, weight float64) *waiter {
		w := &waiter{}
		w.rank.mark = redisstore.TenantSuffix(tenant, weight)
		return w
	}
	seen, one, two1, two2 := mk("seen", 1), mk("one", 3), mk("two", 0.5), mk("two", 0.5)
	uses := markQueued([]core.TenantUse{{Tag: seen.tenantTag(), Units: 3, Waited: 3}}, []*waiter{seen, one, two1, two2, {}}, nil, nil)
	want := []core.TenantUse{
		{Tag: seen.tenantTag(), Units: 3, Waited: 3, Queued: true},
		{Tag: one.tenantTag(), Weight: 3, Queued: true},
		{Tag: two1.tenantTag(), Weight: 0.5, Waited: 1, Queued: true},
	}
	if !slices.Equal(uses, want) {
		t.Errorf("uses %+v, want %+v", uses, want)
	}
}

// While a tenant is held to a cap, the calls of the tenants that are not,
// and of no tenant, go ahead of its calls of their priority, each kind in
// its fair order; the calls of another priority keep their place (seed
// 812).
func TestUncappedFirst(t *testing.T) {
	mk := func(tenant string, prio Priority, tag float64) *waiter {
		w := &waiter{rank: rank{prio: prio, tag: tag}}
		if tenant != "" {
			w.rank.mark = redisstore.TenantSuffix(tenant, 1)
		}
		return w
	}
	hiFlood, flood1, light, flood2, none, flood3, low := mk("flood", PriorityHigh, 0), mk("flood", PriorityNormal, 1), mk("light", PriorityNormal, 2), mk("flood", PriorityNormal, 3), mk("", PriorityNormal, 4), mk("flood", PriorityNormal, 5), mk("light", PriorityLow, 0)
	q := &workerState{queue: []*waiter{hiFlood, flood1, light, flood2, none, flood3, low}}
	uncappedFirst(q, map[string]bool{flood1.tenantTag(): true})
	want := []*waiter{hiFlood, light, none, flood1, flood2, flood3, low}
	if !slices.Equal(q.queue, want) {
		t.Errorf("order %v, want %v", startTags(q.queue), startTags(want))
	}
	uncappedFirst(q, nil)
	if !slices.Equal(q.queue, want) {
		t.Errorf("with none capped, the order changed to %v", startTags(q.queue))
	}
}

// Calls held at one round and calls not held then, all held at the next,
// go in their fair order: a flood not yet capped went ahead of the light
// tenants' capped calls, and once capped too, must not keep its place
// ahead of their earlier tags (seed 64760).
func TestHeldPartsMergeInFairOrder(t *testing.T) {
	mk := func(tenant string, tag float64) *waiter {
		return &waiter{rank: rank{prio: PriorityNormal, tag: tag, mark: redisstore.TenantSuffix(tenant, 1)}}
	}
	t1, t2, flood0, t0, flood1, flood2 := mk("t1", 0), mk("t2", 0), mk("flood", 0), mk("t0", 1), mk("flood", 1), mk("flood", 2)
	q := &workerState{queue: []*waiter{t1, t2, flood0, t0, flood1, flood2}}
	lights := map[string]bool{t1.tenantTag(): true, t2.tenantTag(): true, t0.tenantTag(): true}
	uncappedFirst(q, lights)
	if want := []*waiter{flood0, flood1, flood2, t1, t2, t0}; !slices.Equal(q.queue, want) {
		t.Fatalf("the flood not capped: order %v, want %v", startTags(q.queue), startTags(want))
	}
	all := maps.Clone(lights)
	all[flood0.tenantTag()] = true
	uncappedFirst(q, all)
	if want := []*waiter{flood0, t1, t2, flood1, t0, flood2}; !slices.Equal(q.queue, want) {
		t.Errorf("all capped: order %v, want %v", startTags(q.queue), startTags(want))
	}
	// A call its cap held back keeps its early tag; once the cap lapses,
	// while another tenant's holds, it stays behind the light call that
	// went ahead of it (seed 812): the calls not held keep their order.
	light, held, other := mk("light", 2), mk("flood", 1), mk("other", 6)
	q = &workerState{queue: []*waiter{light, held, other}}
	uncappedFirst(q, map[string]bool{other.tenantTag(): true})
	if want := []*waiter{light, held, other}; !slices.Equal(q.queue, want) {
		t.Errorf("the flood's cap lapsed, another's holds: order %v, want %v", startTags(q.queue), startTags(want))
	}
}

// startTags returns the fair order's start tags of q, for a test's message.
func startTags(q []*waiter) []float64 {
	out := make([]float64, len(q))
	for i, w := range q {
		out[i] = w.rank.tag
	}
	return out
}

// A round that claims for a light call beside a capped tenant leaves a
// due scan to the round after it, so that the light call's round trip
// does not wait for the scan's read; the round after scans, whatever it
// sends, and so does a round that claims for no light call (one that
// sends nothing but the scan included: see holds), or claims while no
// tenant is capped.
func TestLightCallsRoundLeavesTheScan(t *testing.T) {
	th := miniThrottler(t, 100, time.Second)
	mk := func(tenant string) *waiter {
		w := &waiter{n: 1}
		w.rank.tenant, w.rank.mark = tenant, redisstore.TenantSuffix(tenant, 1)
		return w
	}
	flood, light := mk("flood"), mk("light")
	th.mu.Lock()
	defer th.mu.Unlock()
	now := th.now()
	th.known.Near = true
	capped := core.TenantShares{Level: 90, Until: now.Add(time.Hour), Capped: map[string]bool{flood.tenantTag(): true}}
	send := func(batch ...*waiter) bool {
		t.Helper()
		th.worker.queue = []*waiter{flood, light}
		rd := &round{batch: batch}
		rd.Attempt = new(core.Attempt)
		rd.Plan.Claims = make([]core.Claim, len(batch))
		in := core.PlanIn{Now: now, Clock: th.clock.View()}
		tenantRider{}.ask(th, rd.Attempt, &in)
		tenantRider{}.claim(th, rd)
		th.upkeep.done(rd.Attempt, now)
		now = now.Add(time.Second) // the next scan is due
		return rd.Attempt.Tenants.Scan
	}
	for i, tc := range []struct {
		shares core.TenantShares
		batch  []*waiter
		scans  bool
	}{
		{capped, []*waiter{flood}, true},
		{capped, []*waiter{light}, false},
		{capped, []*waiter{light}, true}, // the round before left it
		{capped, []*waiter{light, flood}, false},
		{capped, nil, true}, // the light call not claimed: nothing to leave it for
		{capped, []*waiter{flood}, true},
		{core.TenantShares{}, []*waiter{light}, true}, // no tenant capped
	} {
		th.known.Tenants = tc.shares
		if got := send(tc.batch...); got != tc.scans {
			t.Errorf("round %d: scans %v, want %v", i, got, tc.scans)
		}
	}
}

// The empty tenant is no tenant, whoever set it; a nil context carries
// none and takes one.
func TestEmptyTenantIsNoTenant(t *testing.T) {
	if tenant, ok := TenantFromContext(nil); tenant != "" || ok { //nolint:staticcheck // a nil context is bad input we take
		t.Fatalf("TenantFromContext(nil) = %q, %v; want \"\", false", tenant, ok)
	}
	if tenant, ok := TenantFromContext(ContextWithTenant(nil, "a")); tenant != "a" || !ok { //nolint:staticcheck
		t.Fatalf("ContextWithTenant(nil, a) carries %q, %v; want a, true", tenant, ok)
	}
	cleared := ContextWithTenant(ContextWithTenant(context.Background(), "a"), "")
	if tenant, ok := TenantFromContext(cleared); tenant != "" || ok {
		t.Fatalf("ContextWithTenant(a's, \"\") carries %q, %v; want \"\", false", tenant, ok)
	}
	var o orderOptions
	if r := o.rankOf(cleared, PriorityNormal, false); r.tenant != "" || r.mark != "" {
		t.Fatalf("rankOf the empty tenant = %q, mark %q; want neither", r.tenant, r.mark)
	}
	if r := o.rankOf(ContextWithTenant(context.Background(), "a"), PriorityNormal, false); r.tenant != "a" || r.mark != redisstore.TenantSuffix("a", 1) {
		t.Fatalf("rankOf tenant a = %q, mark %q", r.tenant, r.mark)
	}
}

// What Settle adds past the estimate is the tenant's, as the call's own
// members are: its share counts it. A call of no tenant adds plain debt.
func TestSettleDebtCarriesTheTenant(t *testing.T) {
	for _, tc := range []struct{ tenant, mark string }{{"acme", redisstore.TenantSuffix("acme", 1)}, {"", ""}} {
		mr := miniredis.RunT(t)
		th := mustNew(t, miniDialer(t, mr)(), "quota", 100, time.Minute)
		ctx := ContextWithTenant(context.Background(), tc.tenant)
		p, err := th.Acquire(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Settle(context.Background(), 5); err != nil {
			t.Fatal(err)
		}
		keys := mr.Keys()
		if len(keys) != 1 {
			t.Fatalf("keys %q, want the quota's alone", keys)
		}
		members, err := mr.ZMembers(keys[0])
		if err != nil {
			t.Fatal(err)
		}
		debt, calls := 0, 0
		for _, m := range members {
			if strings.HasPrefix(m, "\x00") && !strings.HasPrefix(m, core.DebtPrefix) {
				continue // the key's own (see redisstore's meta.go)
			}
			calls++
			if strings.HasPrefix(m, core.DebtPrefix) {
				debt++
			}
			if got := redisstore.TenantSuffixOf(m); got != tc.mark {
				t.Errorf("tenant %q: member %q carries %q, want %q", tc.tenant, m, got, tc.mark)
			}
		}
		if calls != 5 || debt != 3 {
			t.Fatalf("tenant %q: %d members of calls, %d of them debt; want 5 and 3", tc.tenant, calls, debt)
		}
	}
}

// A tenant's weight is asked once per call, and counts in the process's
// order as its members' marks count it in Redis: in thousandths, from
// 0.001 to 999.999.
func TestTenantWeightOnceAndAsRedisCountsIt(t *testing.T) {
	for _, tc := range []struct{ give, want float64 }{
		{2, 2}, {1.23456, 1.235}, {5000, 999.999}, {0.0001, 0.001},
		{0, 1}, {-3, 1}, {math.NaN(), 1}, {math.Inf(1), 1},
	} {
		got := weightOf(func(string) float64 { return tc.give }, "a")
		if got != tc.want {
			t.Errorf("weight %v counts as %v, want %v", tc.give, got, tc.want)
		}
		if mark, want := redisstore.TenantSuffix("a", got), redisstore.TenantSuffix("a", tc.give); tc.want != 1 && mark != want {
			t.Errorf("weight %v: the process's weight %v marks %q, Redis's %q", tc.give, got, mark, want)
		}
	}
	var asked atomic.Int64
	th := mustNew(t, miniDialer(t, miniredis.RunT(t))(), "quota", 100, time.Second,
		WithTenantWeight(func(string) float64 { asked.Add(1); return 2 }))
	ctx := ContextWithTenant(context.Background(), "a")
	for range 20 {
		if err := th.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := asked.Load(); n != 20 {
		t.Fatalf("the weight was asked %d times for 20 waits, want 20", n)
	}
}

// The first call of a tenant on a compacted first window warns, once per
// Throttler and once per Group; not on a log (a compacted second limit
// included), nor for calls without a tenant.
func TestTenantOnACompactedWindowWarns(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // New and For do no I/O
	defer rdb.Close()
	const warning = "calls of tenants on a compacted window"
	tenant := ContextWithTenant(context.Background(), "acme")
	for _, c := range []struct {
		name  string
		limit int
		opts  []Option
		want  int
	}{
		{"compacted by default", 5000, nil, 1},
		{"compacted from 100, weighted", 100, []Option{WithCompactFrom(100), WithTenantWeight(func(string) float64 { return 2 })}, 1},
		{"a log", 10_000, []Option{WithCompactFrom(0)}, 0},
		{"under the default", 4999, nil, 0},
		{"a log, its second limit compacted", 100, []Option{WithLimit("{k}:2", 10_000, time.Hour)}, 0},
	} {
		var logs bytes.Buffer
		opts := append(slices.Clone(c.opts), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		th, err := New(rdb, "{k}:1", c.limit, time.Minute, opts...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		th.opt.order.rankOf(context.Background(), PriorityNormal, false)
		if strings.Contains(logs.String(), warning) {
			t.Errorf("%s: warned for a call without a tenant: %q", c.name, logs.String())
		}
		for range 3 {
			th.opt.order.rankOf(tenant, PriorityNormal, false)
		}
		if got := strings.Count(logs.String(), warning); got != c.want {
			t.Errorf("%s: warned %d times, want %d: %q", c.name, got, c.want, logs.String())
		}
	}

	var logs bytes.Buffer
	g, err := NewGroup(rdb, "g:", func(string) (KeyQuota, error) {
		return KeyQuota{Limit: 5000, Interval: time.Hour}, nil
	}, WithThrottlerOptions(WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"token-1", "token-2"} {
		th, err := g.For(key)
		if err != nil {
			t.Fatal(err)
		}
		th.opt.order.rankOf(tenant, PriorityNormal, false)
	}
	if got := strings.Count(logs.String(), warning); got != 1 {
		t.Errorf("a Group's Throttlers warned %d times, want once: %q", got, logs.String())
	}
}
