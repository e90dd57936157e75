package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Policy is the failure policy a scenario's replicas use.
type Policy int

// The failure policies.
const (
	FailClosed Policy = iota
	FailOpen
	FallbackLocal // at a share of 1/replicas
)

func (p Policy) String() string {
	return [...]string{"FailClosed", "FailOpen", "FallbackLocal(1/R)"}[p]
}

// Limit is one limit of a scenario: New's, or one added with WithLimit.
type Limit struct {
	Key      string
	Limit    int
	Interval time.Duration
}

// Kind is what a scheduled event does.
type Kind int

// The events a scenario schedules: faults, and the operations that change
// the shared state mid-run (a pause, a lowered limit).
const (
	Delay      Kind = iota // replies to Replica delayed by D for Span
	DropBefore             // Replica's next K requests cut before they are sent
	DropAfter              // Replica's next K requests applied, then their replies lost
	Stall                  // Redis answers nothing for D
	Flush                  // Redis loses every key (restart empty)
	Failover               // Redis fails over to a copy Lag behind
	Kill                   // Replica killed: connections closed, callers abandoned
	ClockStep              // Replica's local clock steps by D
	Pause                  // Replica calls PauseUntil(now + D)
	Lower                  // Replica calls LowerLimit(K, D)
	numKinds               // the kinds seeds cycle through (see drawFaults)
)

// The kinds that try the clock estimate: drawn on a share of the seeds from
// a source of their own (see Generate), not in the cycle, so that adding
// them changed no seed's other draws.
const (
	DelayRequests Kind = numKinds + iota // Replica's requests reach Redis D late (Jitter: up to D) for Span
	ColdStart                            // Replica's process restarts as process K; for Span its round trips are late by up to D, one way at random
	ColdFleet                            // every replica starts with its round trips late by up to D, one way at random, for Span
	// Replica's (World: every replica's) HTTP requests find at most K idle
	// connections to the API for Span; each of the others sets up a new
	// one, in 0..D drawn per request, between Base and the write. Drawn
	// after the kinds above, from a source of its own (see Generate).
	ConnSetup
	numAllKinds
)

var kindNames = [...]string{"delay", "drop-before-send", "drop-after-apply", "stall",
	"flush", "failover", "kill", "clock-step", "pause", "lower-limit",
	"delay-requests", "cold-start", "cold-fleet", "conn-setup"}

func (k Kind) String() string { return kindNames[k] }

// Kinds lists every event kind.
func Kinds() []Kind {
	out := make([]Kind, numAllKinds)
	for i := range out {
		out[i] = Kind(i)
	}
	return out
}

// Fault is one scheduled event.
type Fault struct {
	At      time.Duration
	Kind    Kind
	Replica int
	D       time.Duration // delay, stall, clock step, pause or lowering length
	Span    time.Duration // how long replies (or requests) are delayed
	Lag     time.Duration // how far behind the failover copy is
	K       int           // requests to cut, the lowered limit, or the restarted process's number
	// Delays drawn per round trip, from 0 to D, instead of D each: the
	// shortest of a few round trips is then still late (Delay and
	// DelayRequests; ColdStart's and ColdFleet's delays always are).
	Jitter bool
}

// End is when the fault stops acting: a delayed reply (or request) arrives
// up to D after the span ends, a stall lasts D; the other kinds act at once.
func (f Fault) End() time.Duration {
	switch f.Kind {
	case Delay, DelayRequests, ColdStart, ColdFleet, ConnSetup:
		return f.At + f.Span + f.D
	case Stall:
		return f.At + f.D
	}
	return f.At
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s at %s", f.Kind, fmtDur(f.At))
	switch f.Kind {
	case Delay, DelayRequests:
		what, by := "replies", "+"+fmtDur(f.D)
		if f.Kind == DelayRequests {
			what = "requests"
		}
		if f.Jitter {
			by = "+0.." + fmtDur(f.D) + " (drawn per round trip)"
		}
		s += fmt.Sprintf(": r%d's %s %s for %s", f.Replica, what, by, fmtDur(f.Span))
	case ColdStart:
		s += fmt.Sprintf(": r%d restarts as a new process, r%d; its round trips +0..%s one way (drawn per round trip) for %s",
			f.Replica, f.K, fmtDur(f.D), fmtDur(f.Span))
	case ColdFleet:
		s += fmt.Sprintf(": every replica starts with round trips +0..%s one way (drawn per round trip) for %s",
			fmtDur(f.D), fmtDur(f.Span))
	case ConnSetup:
		who := fmt.Sprintf("r%d's", f.Replica)
		if f.Replica == World {
			who = "every replica's"
		}
		s += fmt.Sprintf(": %s HTTP requests find at most %d idle connections, others set one up in 0..%s (drawn per request), for %s",
			who, f.K, fmtDur(f.D), fmtDur(f.Span))
	case DropBefore, DropAfter:
		s += fmt.Sprintf(": r%d's next %d requests", f.Replica, f.K)
	case Stall:
		s += fmt.Sprintf(" for %s", fmtDur(f.D))
	case Failover:
		s += fmt.Sprintf(" to a copy %s behind", fmtDur(f.Lag))
	case Kill:
		s += fmt.Sprintf(": r%d", f.Replica)
	case ClockStep:
		s += fmt.Sprintf(": r%d's clock by %s", f.Replica, fmtDur(f.D))
	case Pause:
		s += fmt.Sprintf(": r%d pauses the key for %s", f.Replica, fmtDur(f.D))
	case Lower:
		s += fmt.Sprintf(": r%d lowers the limit to %d for %s", f.Replica, f.K, fmtDur(f.D))
	}
	return s
}

// Scenario is one seed's run: the world, the workload and the faults, all
// drawn from the seed.
type Scenario struct {
	Seed       uint64
	Replicas   int
	Goroutines int // callers per replica
	Limits     []Limit
	Buffer     time.Duration
	Ahead      time.Duration // WithReserveAhead; -1 = the default
	Policy     Policy
	Timeout    time.Duration // WithRedisTimeout; 0 = the default
	CtxClient  []bool        // per replica: the client has ContextTimeoutEnabled
	Skew       []time.Duration
	Latency    time.Duration // every round trip's length without faults (Generate: 0)

	Run      time.Duration // callers start calls until then
	MaxN     int           // WaitN's n is drawn from 1..MaxN
	Allow    float64       // share of calls made with AllowN
	Deadline float64       // share of Waits with a deadline
	Cancel   float64       // share of Waits cancelled at a random moment
	Settle   float64       // share of Waits made as Acquire and settled to a random cost
	// WithInFlight's cap on calls in flight (0 = none) and the leases'
	// ttl. With a cap every Wait is a Acquire whose call holds a place
	// for CallTime at most.
	InFlight int
	LeaseTTL time.Duration
	CallTime time.Duration
	// Calls at random priorities, the low ones capped at LowShare of each
	// limit (WithPriorityShare).
	Priorities bool
	LowShare   float64
	Think      time.Duration // a caller pauses up to this between calls
	// Per replica, the smallest limit it compacts (0 = none: a member per
	// call), and into how many buckets: replicas that disagree share keys
	// as a rollout across the threshold would.
	CompactFrom []int
	Buckets     int
	// Keep is how many calls, the newest, a compaction leaves as members
	// whatever their age (0: no such bound; see core.Window.Keep).
	Keep int
	// Calls made as HTTP requests to a simulated API (seeds that draw
	// ConnSetup only): the share of callers whose calls go through a
	// Transport (Send), and through Do, whose function makes the request
	// with the context Do passes it (SendDo); and the one-way delay from
	// a request's write to its arrival at the API (APIOneWay), the same
	// for every call of the run (a call made with Wait goes at its
	// admission).
	Send, SendDo float64
	APIOneWay    time.Duration
	// The tenants of the calls (ContextWithTenant), on a share of the
	// seeds (see drawTenants): nil without.
	Tenants []Tenant

	Faults []Fault
}

// Calm reports a run with nothing that may keep it from using the whole
// quota once it has started: no fault, pause, lowered limit, deadline,
// cancellation or Allow. Its utilization and waits are checked against
// targets. A fleet's cold start (ColdFleet) leaves a run calm: it slows
// the start, and the targets apply once it is over (see StartLoad).
func (s Scenario) Calm() bool {
	faults := slices.ContainsFunc(s.Faults, func(f Fault) bool { return f.Kind != ColdFleet })
	return !faults && s.Deadline == 0 && s.Cancel == 0 && s.Allow == 0 && s.Think == 0
}

// StartLoad is when the fleet's cold start (ColdFleet) stops acting: the
// last round trip it delays has arrived. Zero without one.
func (s Scenario) StartLoad() time.Duration {
	var end time.Duration
	for _, f := range s.Faults {
		if f.Kind == ColdFleet {
			end = max(end, f.End())
		}
	}
	return end
}

// W is how long an admitted call holds its slot under the first limit:
// interval plus buffer.
func (s Scenario) W() time.Duration { return s.Limits[0].Interval + s.Buffer }

// MinLimit is the smallest limit: the most units one call may claim.
func (s Scenario) MinLimit() int {
	m := s.Limits[0].Limit
	for _, l := range s.Limits[1:] {
		m = min(m, l.Limit)
	}
	return m
}

// MaxLimit is the largest limit.
func (s Scenario) MaxLimit() int {
	m := s.Limits[0].Limit
	for _, l := range s.Limits[1:] {
		m = max(m, l.Limit)
	}
	return m
}

// Has reports whether the scenario schedules an event of kind k.
func (s Scenario) Has(k Kind) bool {
	return slices.ContainsFunc(s.Faults, func(f Fault) bool { return f.Kind == k })
}

func (s Scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d replicas x %d callers, ", s.Seed, s.Replicas, s.Goroutines)
	for i, l := range s.Limits {
		if i > 0 {
			b.WriteString(" + ")
		}
		fmt.Fprintf(&b, "%d per %s", l.Limit, l.Interval)
	}
	ahead := "default"
	if s.Ahead >= 0 {
		ahead = s.Ahead.String()
	}
	fmt.Fprintf(&b, ", buffer %s, ahead %s, %s, run %s, n<=%d, allow %.2f, deadline %.2f, cancel %.2f, think %s",
		s.Buffer, ahead, s.Policy, s.Run, s.MaxN, s.Allow, s.Deadline, s.Cancel, s.Think)
	if s.Latency > 0 {
		fmt.Fprintf(&b, ", round trips %s", s.Latency)
	}
	if s.Settle > 0 {
		fmt.Fprintf(&b, ", settle %.2f", s.Settle)
	}
	if s.InFlight > 0 {
		fmt.Fprintf(&b, ", in flight <=%d (ttl %s, calls up to %s)", s.InFlight, s.LeaseTTL, s.CallTime)
	}
	if s.Priorities {
		fmt.Fprintf(&b, ", priorities (low share %g)", s.LowShare)
	}
	if slices.ContainsFunc(s.CompactFrom, func(n int) bool { return n > 0 }) {
		fmt.Fprintf(&b, ", compacted from %v in %d buckets", s.CompactFrom, s.Buckets)
		if s.Keep > 0 {
			fmt.Fprintf(&b, " keeping the newest %d", s.Keep)
		}
	}
	if slices.ContainsFunc(s.Skew, func(d time.Duration) bool { return d != 0 }) {
		fmt.Fprintf(&b, ", skews %v", s.Skew)
	}
	if s.Send+s.SendDo > 0 {
		fmt.Fprintf(&b, ", HTTP callers %.2f through a Transport and %.2f through Do, the API %s away one way",
			s.Send, s.SendDo, s.APIOneWay)
	}
	b.WriteString(s.tenantString())
	// The faults on the clock estimate and on connections to the API,
	// which came later than the others (those are in FaultLines only): a
	// report that prints only this line still names them.
	for _, f := range s.Faults {
		if f.onClock() || f.Kind == ConnSetup {
			fmt.Fprintf(&b, "; %s", f)
		}
	}
	return b.String()
}

// onClock reports a fault of those that try the clock estimate, drawn
// after the others from sources of their own (see Generate).
func (f Fault) onClock() bool {
	switch f.Kind {
	case DelayRequests, ColdStart, ColdFleet:
		return true
	}
	return f.Jitter
}

// WithoutClockFaults is the scenario without the faults that try the clock
// estimate: as Generate drew it before they existed.
func (s Scenario) WithoutClockFaults() Scenario {
	var faults []Fault
	for _, f := range s.Faults {
		if !f.onClock() {
			faults = append(faults, f)
		}
	}
	s.Faults = faults
	return s
}

// WithoutConnSetup is the scenario without the connection-setup fault and
// the HTTP callers that come with it: as Generate drew it before they
// existed.
func (s Scenario) WithoutConnSetup() Scenario {
	s.Faults = slices.DeleteFunc(slices.Clone(s.Faults), func(f Fault) bool { return f.Kind == ConnSetup })
	if len(s.Faults) == 0 {
		s.Faults = nil
	}
	s.Send, s.SendDo, s.APIOneWay = 0, 0, 0
	return s
}

// FaultLines describes the faults, one a line, for a trace.
func (s Scenario) FaultLines() []string {
	out := make([]string, len(s.Faults))
	for i, f := range s.Faults {
		out[i] = f.String()
	}
	return out
}

// Generate draws seed's scenario. The same seed always gives the same
// scenario. Seeds cycle through the event kinds up to numKinds so that any
// run of numKinds consecutive seeds schedules each at least once, and
// every fourth seed is calm; the kinds on the clock estimate, which came
// later, are drawn on a share of the seeds from sources of their own.
func Generate(seed uint64) Scenario {
	r := rand.New(rand.NewPCG(seed, 0x7468726f74746c65))
	s := Scenario{Seed: seed, Ahead: -1}

	// The world.
	switch {
	case r.IntN(10) == 0:
		s.Replicas = 10 + r.IntN(41) // 10..50
		s.Goroutines = 1 + r.IntN(4)
	default:
		s.Replicas = 1 + r.IntN(6)
		s.Goroutines = 1 + r.IntN(25)
	}
	limit := logInt(r, 1, 5000)
	interval := logDur(r, 10*time.Millisecond, time.Hour)
	s.Limits = []Limit{{Key: "{sim}:a", Limit: limit, Interval: interval}}
	if r.IntN(4) == 0 {
		// A second limit, looser or tighter, over a shorter or longer window.
		l2 := max(1, int(float64(limit)*logFloat(r, 0.25, 4)))
		i2 := time.Duration(float64(interval) * logFloat(r, 0.2, 5))
		s.Limits = append(s.Limits, Limit{Key: "{sim}:b", Limit: l2, Interval: max(time.Millisecond, i2)})
	}
	switch r.IntN(4) {
	case 0:
		s.Buffer = 0
	case 1:
		s.Buffer = 50 * time.Millisecond
	default:
		s.Buffer = time.Duration(float64(interval) * logFloat(r, 0.01, 0.5))
	}
	s.Buffer = min(s.Buffer, 10*interval)
	if r.IntN(3) == 0 {
		s.Ahead = time.Duration(r.Int64N(int64(min(interval, 10*time.Minute)) + 1))
	}
	s.Policy = Policy(r.IntN(3))
	if r.IntN(3) == 0 {
		s.Timeout = logDur(r, 20*time.Millisecond, 2*time.Second)
	}
	s.CtxClient = make([]bool, s.Replicas)
	s.Skew = make([]time.Duration, s.Replicas)
	skewed := r.IntN(2) == 0
	for i := range s.Replicas {
		s.CtxClient[i] = r.IntN(2) == 0
		if skewed {
			s.Skew[i] = time.Duration(r.Int64N(int64(10*time.Second))) - 5*time.Second
		}
	}

	// The workload: a few windows' worth, with call sizes chosen so that a
	// run admits a few hundred calls whatever the limit.
	windows := 2.5 + 2.5*r.Float64()
	s.Run = time.Duration(windows * float64(s.W()))
	units := float64(limit) * windows
	s.MaxN = 1
	if units > 300 || r.IntN(3) == 0 {
		s.MaxN = max(1, min(s.MinLimit(), int(math.Ceil(2*units/300))))
	}
	calm := seed%4 == 0
	if !calm {
		s.Allow = pick(r, 0, 0.1, 0.5)
		s.Deadline = pick(r, 0, 0.3, 0.8)
		s.Cancel = pick(r, 0, 0.1, 0.3)
		if r.IntN(3) == 0 {
			s.Think = time.Duration(float64(s.W()) / float64(limit) * float64(s.Replicas*s.Goroutines) * r.Float64())
		}
		s.Faults = drawFaults(r, s)
	}
	if s.Buffer == 0 && (s.Has(Delay) || s.Has(Stall) || s.Has(ClockStep) ||
		s.Has(DropBefore) || s.Has(DropAfter) || s.Has(Failover)) {
		// The buffer is the margin for latency between admission and the
		// call: with none, any delay is a violation by design. A dropped
		// connection delays too: go-redis retries after a backoff, and a
		// call scored for when its round trip began goes when the retry's
		// reply arrives (seed 905: 18ms late after a failover).
		s.Buffer = min(50*time.Millisecond, interval)
	}
	// Drawn from a source of its own, so that the scenarios generated
	// before settling existed stay what they were (regression seeds).
	if sr := rand.New(rand.NewPCG(seed, 0x736574746c65)); sr.IntN(3) == 0 {
		s.Settle = []float64{0.3, 0.7, 1}[sr.IntN(3)]
	}
	// Likewise for caps on calls in flight, on a quarter of the seeds: a
	// cap from 1 to the number of callers, so that it binds, and calls
	// long enough to fill it.
	if ir := rand.New(rand.NewPCG(seed, 0x666c69676874)); ir.IntN(4) == 0 {
		s.InFlight = 1 + ir.IntN(s.Replicas*s.Goroutines)
		s.LeaseTTL = time.Duration(3+ir.IntN(28)) * time.Second
		s.CallTime = max(time.Millisecond, min(s.W()/time.Duration(1+ir.IntN(20)), 2*s.LeaseTTL))
	}
	// And for priorities, on a quarter of the seeds.
	if pr := rand.New(rand.NewPCG(seed, 0x7072696f)); pr.IntN(4) == 0 {
		s.Priorities = true
		s.LowShare = []float64{0.5, 0.75, 0.9}[pr.IntN(3)]
	}
	// And for compacted windows, on a third of the seeds: every replica
	// compacts every limit, or the larger only, or each replica draws its
	// own threshold (a rollout across it); in few buckets, so that a
	// bucket is a large share of the window.
	if kr := rand.New(rand.NewPCG(seed, 0x636f6d70616374)); kr.IntN(3) == 0 {
		s.Buckets = 1 + kr.IntN(64)
		mode := kr.IntN(3)
		for range s.Replicas {
			switch mode {
			case 0:
				s.CompactFrom = append(s.CompactFrom, 1)
			case 1:
				s.CompactFrom = append(s.CompactFrom, s.MaxLimit())
			default:
				s.CompactFrom = append(s.CompactFrom, []int{0, 1, s.MaxLimit()}[kr.IntN(3)])
			}
		}
		// On half of those, a compaction also moves all but the newest
		// few calls, young or not (a source of its own: the draws above
		// stay as they were).
		if nr := rand.New(rand.NewPCG(seed, 0x6b656570)); nr.IntN(2) == 0 {
			s.Keep = 1 + nr.IntN(2*s.MaxLimit())
		}
	}
	// And for the faults that try the clock estimate (round trips late on
	// one side, which its error bound of half the round trip is about):
	// on a third of the seeds with faults, one more fault of those kinds;
	// on a sixth of all seeds, calm ones too, a fleet's cold start. Not
	// with a zero buffer: the buffer is the margin for latency, and with
	// none any delay is a violation by design (see above).
	if cr := rand.New(rand.NewPCG(seed, 0x636c6f636b)); !calm && s.Buffer > 0 && cr.IntN(3) == 0 {
		s.Faults = append(s.Faults, drawClockFault(cr, s))
	}
	if fr := rand.New(rand.NewPCG(seed, 0x666c656574)); s.Buffer > 0 && fr.IntN(6) == 0 {
		// Every process starts at once on a loaded machine (24 processes
		// on 2 cores): their first samples of the server's clock come from
		// slow, lopsided round trips. Slow, not failing: within half the
		// Redis timeout, so that a calm run stays one (a run whose round
		// trips time out has a Redis outage, which other kinds try).
		timeout := time.Second
		if s.Timeout > 0 {
			timeout = s.Timeout
		}
		s.Faults = append(s.Faults, Fault{Kind: ColdFleet, Replica: World,
			D: logDur(fr, time.Millisecond, min(time.Second, timeout/2)), Span: logDur(fr, 100*time.Millisecond, 10*time.Second)})
	}
	// And for calls made as HTTP requests, on a quarter of the seeds
	// with faults (not with a zero buffer, as above): callers that call
	// through a Transport or Do, and a connection-setup fault.
	if hr := rand.New(rand.NewPCG(seed, 0x636f6e6e)); !calm && s.Buffer > 0 && hr.IntN(4) == 0 {
		s.Send = []float64{0.3, 0.5, 0.8}[hr.IntN(3)]
		s.SendDo = (1 - s.Send) * []float64{0, 0.5}[hr.IntN(2)]
		s.APIOneWay = logDur(hr, 100*time.Microsecond, 100*time.Millisecond)
		s.Faults = append(s.Faults, drawConnSetup(hr, s))
	}
	// And tenants, on a third of the seeds (see drawTenants).
	s.Tenants = drawTenants(seed, s)
	// In time order, those drawn later after those drawn first at the
	// same time; a restarted process takes the next number after the
	// replicas'.
	slices.SortStableFunc(s.Faults, func(a, b Fault) int { return int(a.At - b.At) })
	next := s.Replicas
	for i := range s.Faults {
		if s.Faults[i].Kind == ColdStart {
			s.Faults[i].K = next
			next++
		}
	}
	return s
}

// drawClockFault draws one fault that tries the clock estimate: requests
// late by D, requests or replies late by up to D each (the shortest of
// eight round trips is then still late, and lopsided), or a replica's
// process restarting under load, with a fresh estimate whose first samples
// are slow and lopsided.
func drawClockFault(r *rand.Rand, s Scenario) Fault {
	f := Fault{At: time.Duration(float64(s.Run) * (0.1 + 0.7*r.Float64())), Replica: r.IntN(s.Replicas)}
	// Long enough spans, often, for eight samples of the server's clock
	// to fall in them (a sample at most every 250ms: eight take 2s or
	// more).
	span := logDur(r, 100*time.Millisecond, max(2*s.W(), 10*time.Second))
	switch r.IntN(4) {
	case 0:
		f.Kind, f.D, f.Span = DelayRequests, logDur(r, time.Millisecond, 3*time.Second), span
	case 1:
		f.Kind, f.D, f.Span, f.Jitter = DelayRequests, logDur(r, time.Millisecond, 3*time.Second), span, true
	case 2:
		f.Kind, f.D, f.Span, f.Jitter = Delay, logDur(r, time.Millisecond, 3*time.Second), span, true
	default:
		f.Kind, f.D, f.Span = ColdStart, logDur(r, time.Millisecond, time.Second), logDur(r, 100*time.Millisecond, 10*time.Second)
	}
	return f
}

// drawConnSetup draws a connection-setup fault: on one replica, or on
// every one, from the start (a process's first requests) or later (the
// API closed the idle connections), for one to three windows, with at
// most 0 to 3 idle connections kept and new ones set up in up to half to
// four times the buffer: what the buffer covers, and well past it.
func drawConnSetup(r *rand.Rand, s Scenario) Fault {
	f := Fault{Kind: ConnSetup, Replica: r.IntN(s.Replicas)}
	if r.IntN(4) == 0 {
		f.Replica = World
	}
	if r.IntN(3) > 0 {
		f.At = time.Duration(float64(s.Run) * 0.8 * r.Float64())
	}
	f.Span = logDur(r, s.W(), 3*s.W())
	f.D = max(time.Microsecond, time.Duration(float64(s.Buffer)*logFloat(r, 0.5, 4)))
	f.K = r.IntN(4)
	return f
}

// drawFaults schedules one to four events; the seed's own kind first, so
// that consecutive seeds cover every kind.
func drawFaults(r *rand.Rand, s Scenario) []Fault {
	kinds := []Kind{Kind(s.Seed % uint64(numKinds))}
	for range r.IntN(4) {
		kinds = append(kinds, Kind(r.IntN(int(numKinds))))
	}
	w := s.W()
	var out []Fault
	for _, k := range kinds {
		f := Fault{Kind: k, At: time.Duration(float64(s.Run) * (0.1 + 0.7*r.Float64())), Replica: r.IntN(s.Replicas)}
		switch k {
		case Delay:
			f.D = logDur(r, time.Millisecond, 3*time.Second)
			f.Span = logDur(r, time.Millisecond, max(2*w, 10*time.Millisecond))
		case DropBefore, DropAfter:
			f.K = 1 + r.IntN(5)
		case Stall:
			f.D = logDur(r, time.Millisecond, 3*time.Second)
		case Failover:
			f.Lag = logDur(r, time.Millisecond, 2*time.Second)
		case ClockStep:
			f.D = logDur(r, 100*time.Millisecond, 10*time.Second)
			if r.IntN(2) == 0 {
				f.D = -f.D
			}
		case Pause:
			f.D = logDur(r, max(w/10, time.Millisecond), 2*w)
		case Lower:
			f.K = 1 + r.IntN(max(1, s.Limits[0].Limit-1))
			f.D = logDur(r, max(w/2, time.Millisecond), 3*w)
		}
		out = append(out, f)
	}
	slices.SortStableFunc(out, func(a, b Fault) int { return int(a.At - b.At) })
	return out
}

func pick(r *rand.Rand, xs ...float64) float64 { return xs[r.IntN(len(xs))] }

// logFloat draws from lo..hi, uniform on a log scale.
func logFloat(r *rand.Rand, lo, hi float64) float64 {
	return math.Exp(math.Log(lo) + r.Float64()*(math.Log(hi)-math.Log(lo)))
}

func logInt(r *rand.Rand, lo, hi int) int {
	return min(hi, int(logFloat(r, float64(lo), float64(hi)+1)))
}

func logDur(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return time.Duration(logFloat(r, float64(lo), float64(hi)))
}
