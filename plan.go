package throttler

import (
	"slices"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// Planning a round is a pure function: plan takes the queue's requests and
// a snapshot of what the Throttler knows (planIn), and returns what each
// request gets and what the round trip asks of Redis. It holds no lock and
// touches no channel, logger, random source or Redis: the worker (see
// worker.go) copies the snapshot under the mutex, calls plan, and applies
// the outcome.

// request is what plan sees of a queued call.
type request struct {
	n        int
	deadline time.Time // zero without one
	cause    error     // ErrMaxWait when WithMaxWait set the deadline
	now      bool      // AllowN: now or never
	prio     Priority
}

// planIn is what a round is planned from.
type planIn struct {
	now        time.Time // local
	clock      clockView
	lims       []int // the limits in force now, per window
	pausedTill int64 // server µs
	known      known
	// While sharing after FallbackLocal: a copy of the local window, which
	// plan takes slots from (nil = not sharing), and when sharing ends.
	sharing    *core.LocalWindow
	shareUntil time.Time
	// The runtime's clock (time.Now) at now: the local share keeps its
	// log on it (see core.LocalWindow), not on the local clock, which may step.
	runtime  time.Time
	probe    bool // the round trip carries a probe (see health.lossChecks)
	quietDue bool // no round trip reached Redis for quiet()
	// How much wider than its windows the round counts each claim's
	// neighbourhood, each way (µs), and whether it must claim nothing
	// until the clock estimate is tighter (see margin.go).
	widen int64
	hold  bool
}

// toRuntime converts a local time to the runtime's clock, and fromRuntime
// back, as they stood at in.now.
func (in *planIn) toRuntime(local time.Time) time.Time { return in.runtime.Add(local.Sub(in.now)) }

func (in *planIn) fromRuntime(rt time.Time) time.Time { return in.now.Add(rt.Sub(in.runtime)) }

// verdict is what a round does with one request.
type verdict uint8

const (
	keep   verdict = iota // it stays queued, in its place
	claim1                // it claims its slot in this round trip
	fail                  // it fails at once (decision.err)
	refuse                // AllowN: no room now (decision.retry says when there may be)
)

// decision is plan's word on one request.
type decision struct {
	verdict verdict
	score   int64     // claim1: the slot claimed, server µs
	shareAt time.Time // claim1: its slot in the local share while sharing, on the runtime's clock (zero = none)
	err     error     // fail
	retry   time.Time // refuse: when it might fit
}

// planOut is a planned round.
type planOut struct {
	each     []decision // one per request, in queue order
	claims   []claim    // the claims, in queue order (first is the worker's to set)
	checks   []int64    // distinct scores among the claims, ascending
	exact    bool       // send as MULTI/EXEC, and learn upcoming slots
	slots    int        // how many upcoming free slots to learn (0 = none)
	soonest  int64      // the score of a call that goes when the reply is back
	room     int        // units of the batch (or fair share) left unclaimed
	prioMask uint8      // the priorities (a bit per level) of the requests claimed or kept
	// How long to sleep before the next round when nothing wakes the
	// worker sooner, and whether to add jitter (a wake-up for a slot
	// coming within reach: see config.jitter).
	sleep  time.Duration
	jitter bool
}

// plan picks the batch for the next round trip: requests from the head of
// the queue, each given the earliest free slot known for it, as long as
// that slot lies within the reserve-ahead horizon and the batch has room.
// A request whose slot would be after its deadline fails; an AllowN that
// cannot go now is refused. The slices of buf (the last round's plan) are
// reused.
func plan(c *config, in planIn, reqs []request, buf planOut) planOut {
	var p planner
	p.init(c, in, len(reqs), buf)
	for i, r := range reqs {
		p.place(i, r)
	}
	return p.finish(reqs)
}

// planner is one round's planning under way.
type planner struct {
	c   *config
	in  planIn
	out planOut

	room      int  // units the batch may still take
	known     bool // slots come from the last reply
	pos       int  // units placed against the known slots
	units     int  // units of the requests claimed or kept so far
	full      bool // a WaitN waits: those behind it wait too
	firstKept int  // the first request left queued (-1 = none)
	maxNow    int  // the largest AllowN claimed

	soonest, horizon, floor int64 // server µs
}

func (p *planner) init(c *config, in planIn, n int, buf planOut) {
	*p = planner{c: c, in: in, firstKept: -1, room: c.batchUnits()}
	p.out.each = slices.Grow(buf.each[:0], n)[:n]
	clear(p.out.each)
	p.out.claims, p.out.checks = buf.claims[:0], buf.checks[:0]
	// Far from the limit every call fits now: no slots to look up, and no
	// need for a transaction.
	p.out.exact = in.known.near
	p.known = p.out.exact && in.known.slots != nil
	// A call admitted now goes when the reply is back: score it then.
	p.soonest = in.clock.server(in.now) + in.clock.rtt
	p.out.soonest = p.soonest
	p.horizon = p.soonest + c.opt.ahead.Microseconds()
	// No call goes before a shared pause ends.
	p.floor = max(p.soonest, in.pausedTill)
	if p.out.exact {
		// Near the limit, other processes may be waiting for the same slots.
		p.room = min(p.room, c.fairShare())
	}
}

// place decides request i.
func (p *planner) place(i int, r request) {
	d := &p.out.each[i]
	switch {
	case r.n > p.in.lims[0]:
		*d = decision{verdict: fail, err: invalidf("%s(%d): more calls at once than the limit, lowered to %d", r.name(), r.n, p.in.lims[0])}
	case r.n > p.capOf(r.prio):
		// Only a lowered limit gets here: WaitN and AllowN check n
		// against the caps under the configured limits.
		*d = decision{verdict: fail, err: invalidf("%s(%d): more calls at once than priority %s may take (%d) under the limit, lowered to %d (see WithPriorityShare)",
			r.name(), r.n, r.prio, p.capOf(r.prio), p.in.lims[0])}
	case p.in.hold:
		*d = p.placeHeld(r)
	case r.now:
		*d = p.placeNow(r)
	default:
		*d = p.placeWait(r)
	}
	if d.verdict == keep || d.verdict == claim1 {
		p.units += r.n
		p.out.prioMask |= 1 << r.prio.level()
	}
	switch d.verdict {
	case keep:
		if p.firstKept < 0 {
			p.firstKept = i
		}
	case claim1:
		p.room -= r.n
		p.out.claims = append(p.out.claims, claim{score: d.score, n: r.n, prio: r.prio})
		p.out.checks = addCheck(p.out.checks, d.score)
	}
}

// placeHeld decides a request while the round may claim nothing (see
// margin.go): an AllowN is refused, a WaitN waits for the next round,
// which a clock sample precedes.
func (p *planner) placeHeld(r request) decision {
	if r.now {
		return decision{verdict: refuse}
	}
	if p.out.sleep == 0 || p.out.sleep > holdRetry {
		p.out.sleep = holdRetry
	}
	return decision{verdict: keep}
}

// holdRetry is how soon a round held for a tighter clock estimate tries
// again, after a clock sample.
const holdRetry = 10 * time.Millisecond

// placeNow decides an AllowN's request: a claim for the slot a call made
// when the reply is back would take, or a refusal without a round trip
// when a shared pause or the local share (just back from FallbackLocal)
// already rules it out. Known slots do not refuse it: they may be stale,
// and one round trip tells.
func (p *planner) placeNow(r request) decision {
	in := p.in
	if p.floor > p.soonest {
		return decision{verdict: refuse, retry: in.clock.local(p.floor)}
	}
	if len(p.out.claims) > 0 && r.n > p.room {
		return decision{verdict: keep} // in the next round, at once
	}
	var shareAt time.Time
	if in.sharing != nil {
		if r.n > in.sharing.Limit {
			return decision{verdict: refuse, retry: in.shareUntil}
		}
		if shareAt = in.sharing.Slot(in.runtime, r.n); shareAt.After(in.runtime) {
			return decision{verdict: refuse, retry: in.fromRuntime(shareAt)}
		}
		in.sharing.Take(shareAt, r.n)
	}
	if p.known {
		p.pos += r.n
	}
	p.maxNow = max(p.maxNow, r.n)
	return decision{verdict: claim1, score: p.soonest, shareAt: shareAt}
}

// placeWait decides a WaitN's request: the earliest slot known for it,
// within this process's local share while sharing; or it waits, for the
// slots of the next reply or for its slot to come within reach.
func (p *planner) placeWait(r request) decision {
	in := p.in
	var slots []int64 // the free slots the last reply told of for r's priority
	if in.known.near {
		slots = in.known.at(r.prio)
	}
	if !r.deadline.IsZero() {
		// What the last reply told may already rule its deadline out,
		// however many round trips it waits for (see earliest).
		if at := in.clock.local(earliest(p.c.wins, in.lims, slots, p.floor, p.units, r.n, in.widen)); tooLate(at, r.deadline) {
			return decision{verdict: fail, err: deadlineError(at, r.deadline, r.cause)}
		}
	}
	g := p.floor
	if p.known {
		if p.pos+r.n > len(slots) {
			// Beyond what the last reply told: learn more first.
			p.full = true
			return decision{verdict: keep}
		}
		g = max(p.floor, slots[p.pos+r.n-1])
	}
	g, shareAt := p.withinShare(r, g)
	if !r.deadline.IsZero() {
		if at := in.clock.local(g); tooLate(at, r.deadline) {
			return decision{verdict: fail, err: deadlineError(at, r.deadline, r.cause)}
		}
	}
	p.pos += r.n
	ahead, horizon := p.c.opt.ahead.Microseconds(), p.horizon
	if p.c.capped(r.prio) {
		// A priority held to a share of the limit reserves little ahead:
		// slots it reserved ahead would fill the windows in which the
		// higher priorities are to find their room, for a call is counted
		// against its neighbourhood both ways (see admit), and they could
		// only go after them.
		ahead = p.c.cappedAhead(r.prio)
		horizon = p.soonest + ahead
	}
	// The share bounds what joins a batch, never its first claim: a
	// weighted call larger than the share must still get through.
	if p.full || g > horizon || (r.n > p.room && len(p.out.claims) > 0) {
		if !p.full && len(p.out.claims) == 0 && g > horizon {
			p.out.sleep = in.clock.local(g - ahead).Sub(in.now)
			// Spread the wake-ups of processes waiting for slots to come
			// within reach (over a span a quarter of reserve-ahead long,
			// too long for a capped priority's short reach).
			p.out.jitter = !p.c.capped(r.prio)
		}
		p.full = true
		return decision{verdict: keep}
	}
	if !shareAt.IsZero() {
		in.sharing.Take(shareAt, r.n)
	}
	return decision{verdict: claim1, score: g, shareAt: shareAt}
}

// withinShare places r no earlier than g and, just back from the
// fallback (see fallback.recoveredLocked), also within this process's
// share of the local window; shareAt is then the runtime's time its call
// is recorded at there.
func (p *planner) withinShare(r request, g int64) (_ int64, shareAt time.Time) {
	in := p.in
	if in.sharing == nil {
		return g, time.Time{}
	}
	if r.n > in.sharing.Limit {
		return max(g, in.clock.server(in.shareUntil)), time.Time{}
	}
	// Any time after the local slot fits it; record the call at the time
	// it will go.
	g = max(g, in.clock.server(in.fromRuntime(in.sharing.Slot(in.runtime, r.n))))
	return g, in.toRuntime(in.clock.local(g))
}

// finish completes the plan once every request is placed: how long a round
// that claims nothing sleeps, and what the round trip learns.
func (p *planner) finish(reqs []request) planOut {
	c, in, out := p.c, p.in, &p.out
	out.room = p.room
	if len(out.claims) == 0 {
		// A quiet worker still makes a round trip at least every quiet(),
		// to learn of pauses, lowered limits and losses.
		out.sleep = min(out.sleep, c.quiet())
		if in.probe && in.quietDue {
			out.exact = true
		}
	}
	if p.maxNow > 0 {
		// An AllowN refused learns when it might fit; of two racing for
		// the last slot, exactly one wins.
		out.exact = true
	}
	// A round whose callers wait for a slot it knows, or that only refused
	// AllowN calls without a round trip, sends the probe only when quiet()
	// has passed: the round that claims their slot carries it. (The round
	// right after a claim would otherwise learn again the slot its reply
	// told: a round trip per admission for calls held to a share.)
	probe := in.probe && in.quietDue
	if out.exact && (len(out.claims) > 0 || (p.firstKept >= 0 && out.sleep == 0) || probe) {
		// A round near the limit claims at most a fair share: learning more
		// upcoming slots than that only costs Redis time.
		k := max(c.fairShare(), p.maxNow)
		if p.firstKept >= 0 {
			k = max(k, reqs[p.firstKept].n)
		}
		out.slots = min(slices.Min(in.lims), k)
	}
	return *out
}

// capOf is the most units a call of priority p may claim at once: its cap
// under the tightest limit in force.
func (p *planner) capOf(prio Priority) int {
	return p.c.capUnder(slices.Min(p.in.lims), prio)
}

// addCheck adds score to the distinct, ascending scores checks (claims are
// planned in ascending score order, save AllowN's at soonest).
func addCheck(checks []int64, score int64) []int64 {
	if i, found := slices.BinarySearch(checks, score); !found {
		checks = slices.Insert(checks, i, score)
	}
	return checks
}

// name is the method a request came from, for errors.
func (r request) name() string {
	if r.now {
		return "AllowN"
	}
	return "WaitN"
}
