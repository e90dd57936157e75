package throttler

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/fakeapi"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/go-throttler/throttler/internal/replica"
)

// TestFaultInFlightReplicaKilled: three replica processes, many goroutines
// each, call an API that serves at most n requests at once (and refuses one
// more) through their Transports with WithInFlight(n, ttl); one is
// SIGKILLed while it has calls at the API, and is not replaced. The API
// never has more than n in flight and refuses nothing; the dead replica's
// places stay taken while their leases live; and the survivors have n calls
// at the API again within the documented bound.
//
// The bound. Each of the dead replica's leases was last written (granted,
// or renewed by its keeper every ttl/3) before the kill, with an expiry of
// ttl past that write on its estimate of the server's clock, so it expires
// at most ttl after the kill, give or take that estimate's error (half the
// shortest recent round trip: clockSlack is generous). Its last renewal
// being at most ttl/3 before the kill bounds the other side: a lease
// renewed on time lives at least 2ttl/3 after the kill, which the test only
// logs. Once a lease expired, the next lease script that runs trims it and
// grants its place: the survivors run one at each release of theirs (a
// call ends every hold/n or so) and when the earliest lease they were told
// of expires, so within a round trip or two (reactSlack); the survivors'
// concurrency at the API is n once their n places are all at the API at
// the same instant, which happens within a hold or so (each place is away
// from the API only between a response and the next grant's request).
//
// No replacement is started: it could not take the dead replica's places
// any sooner than the survivors, and without one "the survivors' calls
// reach n" is the whole recovery. (TestFaultReplicasKilled covers
// replacements.)
func TestFaultInFlightReplicaKilled(t *testing.T) {
	const (
		n          = 4
		ttl        = minLeaseTTL // 3s
		hold       = 150 * time.Millisecond
		goroutines = 8 // per replica: 24 callers for 4 places
		clockSlack = 50 * time.Millisecond
		reactSlack = 250 * time.Millisecond
		bound      = ttl + clockSlack + reactSlack + hold
	)
	srv := redistest.Start(t)
	f := newFleet(t, srv, replica.Config{
		Limit: 1000, Interval: time.Second, Buffer: 50 * time.Millisecond, // not the binding constraint
		Goroutines: goroutines, RoundTripper: true, InFlight: n, LeaseTTL: ttl,
	}, fakeapi.WithMaxInFlight(n), fakeapi.WithHold(hold))
	api := f.api.api
	client := srv.NewClient()

	var procs [3]*replicaProc
	for i := range procs {
		procs[i] = f.start(nil)
	}
	// Healthy first: every replica got calls through, and the cap filled.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		atAPI := inFlightAt(api.Spans(), time.Time{}, "")
		served := true
		for _, p := range procs {
			served = served && f.api.received(p.cfg.ID) > 0
		}
		if served && api.InFlight().Max >= n && len(atAPI) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 10s: requests per replica %d/%d/%d, most in flight %d (want every replica served and %d at once)",
				f.api.received(procs[0].cfg.ID), f.api.received(procs[1].cfg.ID), f.api.received(procs[2].cfg.ID), api.InFlight().Max, n)
		}
	}

	// The victim: the replica with the most calls at the API right now.
	var victim *replicaProc
	for deadline := time.Now().Add(5 * time.Second); victim == nil; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no replica had 2 calls at the API at once within 5s")
		}
		atAPI := inFlightAt(api.Spans(), time.Now(), "")
		for _, p := range procs {
			if atAPI[p.cfg.ID] >= 2 && (victim == nil || atAPI[p.cfg.ID] > atAPI[victim.cfg.ID]) {
				victim = p
			}
		}
	}
	killedAt := f.kill(victim)
	killedSrv := serverMicros(t, client)
	f.mu.Lock()
	prefix := victim.prefix
	f.mu.Unlock()
	midCall := inFlightAt(api.Spans(), killedAt, "")[victim.cfg.ID]
	// What the dead left in Redis (read a moment later, after anything it
	// wrote before dying).
	time.Sleep(20 * time.Millisecond)
	var dead []int64 // expiries, server µs
	for m, score := range keyMembers(t, client, f.base.InFlightKey) {
		if strings.HasPrefix(m, prefix) {
			dead = append(dead, score)
		}
	}
	slices.Sort(dead)
	if midCall == 0 || len(dead) == 0 {
		t.Fatalf("the victim %s had %d calls at the API when killed and left %d leases: not killed mid-call", victim.cfg.ID, midCall, len(dead))
	}
	for _, e := range dead {
		if e > killedSrv+(ttl+clockSlack).Microseconds() {
			t.Errorf("a dead replica's lease expires %s after the kill, past ttl %s (+%s for its clock estimate)", fmtMicros(e-killedSrv), ttl, clockSlack)
		}
	}

	// Recovery: the survivors' calls at the API reach n again.
	var recovered time.Time
	for deadline := killedAt.Add(bound + time.Second); recovered.IsZero() && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		recovered = firstAt(api.Spans(), killedAt, victim.cfg.ID, n)
	}
	f.stopAll()
	o := f.verify()

	spans := api.Spans()
	fl := api.InFlight()
	if fl.Max > n || fl.OverCap > 0 {
		t.Errorf("the API had up to %d requests in flight, cap %d, and refused %d for it: %v", fl.Max, n, fl.OverCap, api.OverCap())
	}
	// While a dead lease lives, its place is not the survivors': checked at
	// each survivor call's start after the kill, an expiry counted live up
	// to clockSlack early (a lease script trims at its process's estimate
	// of the server's clock).
	for _, s := range spans {
		if s.Replica == victim.cfg.ID || s.Start.Before(killedAt) {
			continue
		}
		live := 0
		for _, e := range dead {
			if e > s.Start.Add(clockSlack).UnixMicro() {
				live++
			}
		}
		if at := survivorsAt(spans, s.Start, victim.cfg.ID); at+live > n {
			t.Errorf("%s after the kill the survivors had %d calls at the API while %d of the dead replica's leases lived: over the cap %d",
				s.Start.Sub(killedAt).Round(time.Millisecond), at, live, n)
			break
		}
	}
	recovery := "never"
	if recovered.IsZero() {
		t.Errorf("the survivors never had %d calls at the API at once after the kill (waited %s, bound %s)", n, bound+time.Second, bound)
	} else {
		r := recovered.Sub(killedAt)
		recovery = r.Round(time.Millisecond).String()
		if r > bound {
			t.Errorf("the survivors had %d calls at the API again %s after the kill, past the bound %s (ttl %s + %s clock + %s reaction + %s hold)",
				n, r, bound, ttl, clockSlack, reactSlack, hold)
		}
	}
	t.Logf("outcome: %d calls at the API, most in flight %d (cap %d), %d refused for the cap; victim %s killed with %d calls at the API and %d leases expiring %s..%s after the kill; survivors back to %d at the API %s after the kill (bound %s); %s",
		len(spans), fl.Max, n, fl.OverCap, victim.cfg.ID, midCall, len(dead), fmtMicros(dead[0]-killedSrv), fmtMicros(dead[len(dead)-1]-killedSrv),
		n, recovery, bound, o)
}

// inFlightAt counts, per replica, the requests in flight at the API at t
// (the zero t: still in flight now), leaving out except's.
func inFlightAt(spans []fakeapi.Span, t time.Time, except string) map[string]int {
	in := map[string]int{}
	for _, s := range spans {
		if s.Replica == except {
			continue
		}
		if t.IsZero() && s.End.IsZero() || !t.IsZero() && !s.Start.After(t) && (s.End.IsZero() || s.End.After(t)) {
			in[s.Replica]++
		}
	}
	return in
}

// survivorsAt is how many requests other than except's were in flight at t.
func survivorsAt(spans []fakeapi.Span, t time.Time, except string) int {
	total := 0
	for _, c := range inFlightAt(spans, t, except) {
		total += c
	}
	return total
}

// firstAt returns the first request start after from at which n requests
// other than except's were in flight, or the zero time.
func firstAt(spans []fakeapi.Span, from time.Time, except string, n int) time.Time {
	for _, s := range spans { // in order of arrival
		if s.Replica != except && s.Start.After(from) && survivorsAt(spans, s.Start, except) >= n {
			return s.Start
		}
	}
	return time.Time{}
}
