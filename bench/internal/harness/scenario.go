// Package harness runs the comparison: a redis-server, a fake API, replica
// processes that wait on each implementation and call the API, and the
// report (a Markdown table, JSON and an SVG chart).
package harness

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-throttler/throttler/bench/internal/impls"
)

// Kind is what a scenario's replicas do after each admission.
type Kind string

const (
	// KindAPI: wait, then GET the fake API. Throttled: demand exceeds limit.
	KindAPI Kind = "api"
	// KindLatency: one goroutine times a PING, then a Wait; limit never reached.
	KindLatency Kind = "latency"
	// KindCeiling: Wait in a loop, nothing else; limit never reached.
	KindCeiling Kind = "ceiling"
	// KindMemory: admit Calls calls in one long window, in the harness
	// process, then measure the key; with Rest, measure it once more
	// after Rest and 12 more calls, 100ms apart.
	KindMemory Kind = "memory"
	// KindKeys: Keys keys, each with its own quota of Limit per Interval
	// (this library's Group; redis_rate's GCRA, one state per key; the
	// floor, a byte under each): one call on each, then, on an empty Redis,
	// Calls on each; Redis's memory per key after each (see runKeys).
	KindKeys Kind = "keys"
	// KindLLM: POST calls to a fake LLM API (internal/fakellm) that enforces
	// Limit tokens and Requests calls per Interval on the tokens each call
	// used, through a throttler.Transport with a Cost (estimate prompt +
	// max_tokens, settle with the usage) and a second Throttler for the
	// requests. Only this library takes part: the peers have no cost to
	// settle.
	KindLLM Kind = "llm"
	// KindInFlight: call the API through the library's Do with
	// WithInFlight(InFlight); the API holds each call and caps the calls in
	// flight at InFlight. Not throttled by the rate.
	KindInFlight Kind = "inflight"
	// KindStorm: each Wait has its own deadline, drawn uniformly in
	// [DeadlineMin, DeadlineMax]; an admitted call GETs the API, and a
	// goroutine whose Wait failed before its deadline sleeps until the
	// deadline would have passed, then tries again.
	KindStorm Kind = "storm"
	// KindPriority: high-priority calls arrive open-loop, HighRate a second
	// in each process at Poisson times, each in its own goroutine: Wait
	// with a PriorityHigh context, then GET the API. Besides, Goroutines
	// goroutines (none: no flood) loop Wait with a PriorityLow context,
	// then GET the API. Only this library takes part: the peers have no
	// priorities.
	KindPriority Kind = "priority"
	// KindFar: the API over HTTPS, OneWay away each way through a
	// netfault proxy, enforcing the strict window itself (429s); each
	// replica's goroutines GET it through
	// &http.Client{Transport: thr.RoundTripper(base)}, base a clone of
	// http.DefaultTransport trusting the API's CA; the last Joiners
	// processes start JoinAt after the others (see far.go). Only this
	// library takes part: the peers have no RoundTripper.
	KindFar Kind = "far"
	// KindRedisFault: as KindAPI, with each replica's Redis connections
	// through a netfault proxy of its own, which Fault breaks (see
	// faults.go); with WaitTimeout, each Wait has that deadline.
	KindRedisFault Kind = "redis-fault"
	// KindTenants: each replica runs the calls of the Tenants that run on
	// it, on one Throttler: a tenant's goroutines loop Wait with its
	// tenant's context (throttler.ContextWithTenant; none when Untagged),
	// then GET the API; or its calls arrive open-loop, Rate a second, each
	// in its own goroutine. Only this library takes part: the peers have
	// no tenants.
	KindTenants Kind = "tenants"
)

// callsAPI reports whether the replicas of this kind call the fake API
// (internal/fakeapi) after each admission: its arrivals there give the
// rate's figures.
func (k Kind) callsAPI() bool {
	return k == KindAPI || k == KindInFlight || k == KindStorm || k == KindPriority || k == KindFar || k == KindRedisFault || k == KindTenants
}

// reportsStats reports whether the replicas of this kind report this
// library's Stats at their end (ReplicaResult.Stats, Row.Stats).
func (k Kind) reportsStats() bool {
	return k == KindFar || k == KindRedisFault || k == KindTenants
}

// Scenario is one workload, run once per implementation.
type Scenario struct {
	Name       string
	Kind       Kind
	Procs      int           // replica processes
	Goroutines int           // per process
	Limit      int           // calls per Interval, shared by all processes
	Interval   time.Duration // window
	Duration   time.Duration // how long each replica runs
	// Warmup is left out of rates, fairness and wait percentiles: the first
	// window, where every implementation may admit a full quota at once.
	Warmup time.Duration
	Calls  int // KindMemory: calls to admit; KindKeys: calls per key
	Keys   int // KindKeys: how many keys
	// KindMemory: how long after the calls to measure the key again (after
	// 12 more calls), when a compacted window's calls have moved into
	// their buckets: its age (a minute at most) plus a trim period.
	Rest  time.Duration
	Impls []string // implementations that take part
	// KindLLM: Limit is in tokens; Requests is the calls allowed per
	// Interval, and Unit how many tokens one unit of the token Throttler
	// stands for.
	Requests, Unit int
	// KindInFlight: the cap on calls in flight (the API's and the
	// library's), and the range of the API's uniform random hold per call.
	InFlight         int
	HoldMin, HoldMax time.Duration
	// KindStorm: the range of each Wait's deadline.
	DeadlineMin, DeadlineMax time.Duration
	// KindPriority: high-priority arrivals per second, per process.
	HighRate float64
	// KindFar: the API's delay each way, whether it offers HTTP/2, how
	// long it keeps an idle connection, and the processes (the last
	// Joiners of Procs) that start JoinAt after the others.
	OneWay      time.Duration
	HTTP2       bool
	IdleTimeout time.Duration
	Joiners     int
	JoinAt      time.Duration
	// KindRedisFault: what breaks the replicas' Redis links, and each
	// Wait's deadline (0: none).
	Fault       *Fault
	WaitTimeout time.Duration
	// KindTenants: the tenants and their calls (Goroutines is 0: each
	// tenant says its own); whether the calls go without their tenant (the
	// same workload, untagged: the library's cost without tenants); and
	// the length of the periods after the warm-up in which each tenant's
	// share of the calls at the API is counted.
	Tenants  []TenantLoad
	Untagged bool
	Period   time.Duration
	// KindTenants: tenants that come and go besides (see churn.go).
	Churn *TenantChurn
	// OptIn: left out when no scenario is named (see Select), because it
	// would make the default run much longer.
	OptIn bool
}

func (s Scenario) String() string {
	switch s.Kind {
	case KindMemory:
		return fmt.Sprintf("%s: admit %d calls in one window (limit %d per %s), %d goroutines, then MEMORY USAGE",
			s.Name, s.Calls, s.Limit, s.Interval, s.Goroutines)
	case KindKeys:
		return fmt.Sprintf("%s: %d keys, each its own quota of %d per %s, one call on each, then (anew, active expiry off) %d on each, %d goroutines, then used_memory per key",
			s.Name, s.Keys, s.Limit, s.Interval, s.Calls, s.Goroutines)
	case KindAPI:
		return fmt.Sprintf("%s: %d procs x %d goroutines, limit %d per %s, %s per implementation, wait then GET the API",
			s.Name, s.Procs, s.Goroutines, s.Limit, s.Interval, s.Duration)
	case KindLLM:
		return fmt.Sprintf("%s: %d procs x %d goroutines, %d tokens and %d requests per %s (a minute / %g), %s, POST a fake LLM API through a Transport with a Cost",
			s.Name, s.Procs, s.Goroutines, s.Limit, s.Requests, s.Interval, float64(time.Minute)/float64(s.Interval), s.Duration)
	case KindInFlight:
		return fmt.Sprintf("%s: %d procs x %d goroutines, at most %d calls in flight (the API holds each %s-%s and refuses one over the cap), limit %d per %s (not binding), %s, Do(GET the API)",
			s.Name, s.Procs, s.Goroutines, s.InFlight, s.HoldMin, s.HoldMax, s.Limit, s.Interval, s.Duration)
	case KindStorm:
		return fmt.Sprintf("%s: %d procs x %d goroutines, limit %d per %s, %s per implementation, each Wait with a deadline of %s-%s, then GET the API; a Wait failed early sleeps out its deadline",
			s.Name, s.Procs, s.Goroutines, s.Limit, s.Interval, s.Duration, s.DeadlineMin, s.DeadlineMax)
	case KindPriority:
		return fmt.Sprintf("%s: %d procs, each with high-priority calls arriving at %g/s (Poisson, each in its own goroutine) and %d low-priority goroutines, limit %d per %s, %s, wait then GET the API",
			s.Name, s.Procs, s.HighRate, s.Goroutines, s.Limit, s.Interval, s.Duration)
	case KindFar:
		proto := "HTTP/1.1 only"
		if s.HTTP2 {
			proto = "HTTP/2 offered"
		}
		return fmt.Sprintf("%s: the API over HTTPS (%s, idle connections closed after %s) %s away each way, enforcing %d per %s (429 over it), %d procs x %d goroutines (%d of them joining at %s), %s, GET through thr.RoundTripper(a clone of http.DefaultTransport)",
			s.Name, proto, s.IdleTimeout, s.OneWay, s.Limit, s.Interval, s.Procs, s.Goroutines, s.Joiners, s.JoinAt, s.Duration)
	case KindRedisFault:
		deadline := "no deadline"
		if s.WaitTimeout > 0 {
			deadline = fmt.Sprintf("a %s deadline", s.WaitTimeout)
		}
		return fmt.Sprintf("%s: %d procs x %d goroutines, limit %d per %s, %s, each replica's Redis link through a proxy: %s; each Wait with %s, then GET the API",
			s.Name, s.Procs, s.Goroutines, s.Limit, s.Interval, s.Duration, s.Fault, deadline)
	case KindTenants:
		return tenantsString(s)
	case KindLatency:
		return fmt.Sprintf("%s: %d proc x %d goroutine, limit %d per %s (never reached), %s, PING then Wait",
			s.Name, s.Procs, s.Goroutines, s.Limit, s.Interval, s.Duration)
	}
	return fmt.Sprintf("%s: %d procs x %d goroutines, limit %d per %s (never reached), %s, Wait in a loop",
		s.Name, s.Procs, s.Goroutines, s.Limit, s.Interval, s.Duration)
}

// ScenarioNames lists the scenarios in the order they run.
var ScenarioNames = []string{"saturate", "herd", "latency", "ceiling", "memory", "llm", "inflight", "herd24", "storm", "storm10", "priority", "priority-calm", "memory-day", "memory-day-full", "keys",
	"far-h1", "far-h2", "redis-reset", "redis-cut", "redis-jitter", "redis-slow", "redis-stall", "redis-lopsided",
	"tenants-flood", "tenants-calm", "tenants-skewed", "tenants-weighted", "tenants-skewed-plain", "tenants-churn"}

// OptInNames lists the scenarios that run only when named: each takes a
// minute or more for all its implementations, or measures one feature of
// this library.
var OptInNames = []string{"herd24", "storm", "storm10", "priority", "priority-calm", "memory-day", "memory-day-full", "keys",
	"far-h1", "far-h2", "redis-reset", "redis-cut", "redis-jitter", "redis-slow", "redis-stall", "redis-lopsided",
	"tenants-flood", "tenants-calm", "tenants-skewed", "tenants-weighted", "tenants-skewed-plain", "tenants-churn"}

// Scenarios returns the standard scenarios, full-length or quick.
func Scenarios(quick bool) []Scenario {
	pick := func(full, short time.Duration) time.Duration {
		if quick {
			return short
		}
		return full
	}
	// Every limiter but throttler-log, which only the scenarios where this
	// library compacts (a limit of 5,000 or more) add, and
	// throttler-compact, which the saturating ones add where it does not;
	// floor and three-commands are no limiters (the keys and the latency
	// scenarios name them).
	all := slices.DeleteFunc(slices.Clone(impls.Names), func(n string) bool {
		return slices.Contains([]string{"throttler-log", "throttler-compact", "floor", "three-commands"}, n)
	})
	withLog := slices.Concat(all, []string{"throttler-log"})
	withCompact := slices.Concat(all, []string{"throttler-compact"})
	return slices.Concat([]Scenario{
		{Name: "saturate", Kind: KindAPI, Procs: 3, Goroutines: 50, Limit: 100, Interval: time.Second,
			Duration: pick(10*time.Second, 4*time.Second), Warmup: time.Second, Impls: withCompact},
		{Name: "herd", Kind: KindAPI, Procs: 3, Goroutines: 300, Limit: 50, Interval: time.Second,
			Duration: pick(10*time.Second, 4*time.Second), Warmup: time.Second, Impls: withCompact},
		{Name: "latency", Kind: KindLatency, Procs: 1, Goroutines: 1, Limit: 1_000_000, Interval: time.Second,
			Duration: pick(3*time.Second, 1500*time.Millisecond), Warmup: 250 * time.Millisecond, Impls: append(withLog, "three-commands")},
		{Name: "ceiling", Kind: KindCeiling, Procs: 2, Goroutines: 64, Limit: 1_000_000, Interval: time.Second,
			Duration: pick(5*time.Second, 2*time.Second), Warmup: pick(time.Second, 500*time.Millisecond), Impls: withLog},
		{Name: "memory", Kind: KindMemory, Goroutines: 16, Limit: 20_000, Interval: time.Hour, Calls: 10_000,
			Impls: []string{"throttler", "seed"}},
		// A minute lasts 6s: examples/llm's default speed.
		{Name: "llm", Kind: KindLLM, Procs: 3, Goroutines: 8, Limit: 10_000, Requests: 60, Unit: 10, Interval: 6 * time.Second,
			Duration: pick(30*time.Second, 12*time.Second), Warmup: 6 * time.Second, Impls: []string{"throttler"}},
		// The peers have no cap on calls in flight across processes.
		{Name: "inflight", Kind: KindInFlight, Procs: 3, Goroutines: 40, Limit: 1000, Interval: time.Second,
			InFlight: 10, HoldMin: 50 * time.Millisecond, HoldMax: 150 * time.Millisecond,
			Duration: pick(10*time.Second, 4*time.Second), Warmup: time.Second, Impls: []string{"throttler"}},
		// The herd spread over many processes: 600 callers, 24 processes.
		{Name: "herd24", Kind: KindAPI, Procs: 24, Goroutines: 25, Limit: 100, Interval: time.Second,
			Duration: pick(10*time.Second, 4*time.Second), Warmup: time.Second, Impls: all, OptIn: true},
		// The herd with deadlines: most Waits cannot be served in time.
		{Name: "storm", Kind: KindStorm, Procs: 3, Goroutines: 300, Limit: 50, Interval: time.Second,
			DeadlineMin: 10 * time.Millisecond, DeadlineMax: 500 * time.Millisecond,
			Duration: pick(10*time.Second, 4*time.Second), Warmup: time.Second, Impls: all, OptIn: true},
		// The storm 10 times larger.
		{Name: "storm10", Kind: KindStorm, Procs: 3, Goroutines: 3000, Limit: 50, Interval: time.Second,
			DeadlineMin: 10 * time.Millisecond, DeadlineMax: 500 * time.Millisecond,
			Duration: pick(10*time.Second, 4*time.Second), Warmup: time.Second, Impls: all, OptIn: true},
		// High-priority calls at 30% of the limit, with a low-priority
		// flood and without (the baseline of their waits). The peers have
		// no priorities.
		{Name: "priority", Kind: KindPriority, Procs: 3, Goroutines: 100, HighRate: 10, Limit: 100, Interval: time.Second,
			Duration: pick(10*time.Second, 4*time.Second), Warmup: time.Second, Impls: []string{"throttler"}, OptIn: true},
		{Name: "priority-calm", Kind: KindPriority, Procs: 3, HighRate: 10, Limit: 100, Interval: time.Second,
			Duration: pick(10*time.Second, 4*time.Second), Warmup: time.Second, Impls: []string{"throttler"}, OptIn: true},
		// A daily quota of a million in one key, a fifth of it used.
		{Name: "memory-day", Kind: KindMemory, Goroutines: 32, Limit: 1_000_000, Interval: 24 * time.Hour,
			Calls: pickN(quick, 200_000, 20_000), Rest: 95 * time.Second, Impls: []string{"throttler", "throttler-log"}, OptIn: true},
		// Nearly the whole day's quota at once (99%: the calls after
		// the rest must fit too).
		{Name: "memory-day-full", Kind: KindMemory, Goroutines: 32, Limit: 1_000_000, Interval: 24 * time.Hour,
			Calls: pickN(quick, 990_000, 20_000), Rest: 95 * time.Second, Impls: []string{"throttler", "throttler-log"}, OptIn: true},
		// A quota per customer: many small keys.
		{Name: "keys", Kind: KindKeys, Goroutines: 64, Limit: 10, Interval: time.Minute,
			Keys: pickN(quick, 100_000, 10_000), Calls: 10, Impls: []string{"throttler", "redis_rate", "floor"}, OptIn: true},
	}, farScenarios(pick), faultScenarios(pick), tenantScenarios(pick))
}

// farScenarios are the API 40ms away over HTTPS (issue 40): 3 processes
// start cold at once and a fourth joins; the warm-up is the first two
// windows, where new connections make the first calls late.
func farScenarios(pick func(full, short time.Duration) time.Duration) []Scenario {
	far := Scenario{Kind: KindFar, Procs: 4, Joiners: 1, JoinAt: pick(5*time.Second, 2*time.Second), Goroutines: 10,
		Limit: 20, Interval: time.Second, OneWay: 20 * time.Millisecond, IdleTimeout: 2 * time.Second,
		Duration: pick(12*time.Second, 4*time.Second), Warmup: 2 * time.Second, Impls: []string{"throttler"}, OptIn: true}
	h1, h2 := far, far
	h1.Name = "far-h1"
	h2.Name, h2.HTTP2 = "far-h2", true
	return []Scenario{h1, h2}
}

// faultScenarios are saturate's load with each replica's Redis link
// broken (see Fault).
func faultScenarios(pick func(full, short time.Duration) time.Duration) []Scenario {
	sc := func(name string, f *Fault) Scenario {
		return Scenario{Name: name, Kind: KindRedisFault, Procs: 3, Goroutines: 50, Limit: 100, Interval: time.Second,
			Duration: pick(12*time.Second, 4*time.Second), Warmup: time.Second, Fault: f,
			Impls: []string{"throttler", "seed", "redis_rate"}, OptIn: true}
	}
	stall := sc("redis-stall", &Fault{Replica: 0, Stall: 4 * time.Second, First: 2 * time.Second, Every: 6 * time.Second})
	stall.Duration, stall.WaitTimeout = pick(14*time.Second, 4*time.Second), 2*time.Second
	return []Scenario{
		sc("redis-reset", &Fault{Replica: -1, Reset: 200 * time.Millisecond, First: time.Second, Every: time.Second}),
		sc("redis-cut", &Fault{Replica: -1, Cut: 200 * time.Millisecond, First: time.Second, Every: time.Second}),
		sc("redis-jitter", &Fault{Replica: -1, JitterUp: 20 * time.Millisecond, JitterDown: 20 * time.Millisecond}),
		sc("redis-slow", &Fault{Replica: -1, Rate: 64 << 10, Up: 5 * time.Millisecond, Down: 5 * time.Millisecond}),
		stall,
		sc("redis-lopsided", &Fault{Replica: 0, Down: 150 * time.Millisecond}),
	}
}

// pickN is full, or short for a quick run.
func pickN(quick bool, full, short int) int {
	if quick {
		return short
	}
	return full
}

// Select keeps the scenarios named (all but the OptIn ones when names is
// empty) and, in each,
// the implementations named (all when impls is empty). Unknown names are
// errors.
func Select(all []Scenario, names, implNames []string) ([]Scenario, error) {
	for _, n := range names {
		if !slices.ContainsFunc(all, func(s Scenario) bool { return s.Name == n }) {
			return nil, fmt.Errorf("unknown scenario %q (have %s)", n, strings.Join(ScenarioNames, ","))
		}
	}
	for _, n := range implNames {
		if !slices.Contains(impls.Names, n) {
			return nil, fmt.Errorf("unknown implementation %q (have %s)", n, strings.Join(impls.Names, ","))
		}
	}
	var out []Scenario
	for _, s := range all {
		if wanted := slices.Contains(names, s.Name) || len(names) == 0 && !s.OptIn; !wanted {
			continue
		}
		if len(implNames) > 0 {
			s.Impls = slices.DeleteFunc(slices.Clone(s.Impls), func(i string) bool { return !slices.Contains(implNames, i) })
		}
		if len(s.Impls) > 0 {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario left to run")
	}
	return out, nil
}
