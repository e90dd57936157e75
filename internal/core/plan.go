package core

import (
	"math"
	"slices"
	"time"
)

// Planning a round is a pure function: Plan takes the queue's requests and
// a snapshot of what the Throttler knows (PlanIn), and returns what each
// request gets and what the round trip asks of Redis. It holds no lock and
// touches no channel, logger, random source or Redis: the throttler's
// worker (see its worker.go) copies the snapshot under its mutex, calls
// Plan, and applies the outcome.

// Request is what Plan sees of a queued call.
type Request struct {
	N        int
	Deadline time.Time // zero without one
	Now      bool      // AllowN: now or never
	Prio     Level
	Tenant   string // its tenant's tag (see TenantUse), "" for none
	// SoonTried: it was claimed at the soonest slot while a tenant was held
	// to a cap as many times as it may be (see planner.soon).
	SoonTried bool
}

// PlanIn is what a round is planned from.
type PlanIn struct {
	Now        time.Time // local
	Clock      ClockView
	Lims       []int // the limits in force now, per window
	PausedTill int64 // server µs
	Known      Known
	// While sharing after the throttler's FallbackLocal: a copy of the local
	// window, which Plan takes slots from (nil = not sharing), and when
	// sharing ends.
	Sharing    *LocalWindow
	ShareUntil time.Time
	// The runtime's clock (time.Now) at Now: the local share keeps its
	// log on it (see LocalWindow), not on the local clock, which may step.
	Runtime  time.Time
	Probe    bool // the round trip carries a probe (Attempt.Loss.Probes)
	QuietDue bool // no round trip reached Redis for Rules.Quiet
	// How much wider than its windows the round counts each claim's
	// neighbourhood, each way (µs), and whether it must claim nothing
	// until the clock estimate is tighter (see margin.go).
	Widen int64
	Hold  bool
}

// toRuntime converts a local time to the runtime's clock, and fromRuntime
// back, as they stood at in.Now.
func (in *PlanIn) toRuntime(local time.Time) time.Time { return in.Runtime.Add(local.Sub(in.Now)) }

func (in *PlanIn) fromRuntime(rt time.Time) time.Time { return in.Now.Add(rt.Sub(in.Runtime)) }

// Action is what a round does with one request.
type Action uint8

const (
	Keep   Action = iota // it stays queued, in its place
	Take                 // it claims its slot in this round trip
	Fail                 // it fails at once (Decision.Why says why)
	Refuse               // AllowN: no room now (Decision.At says when there may be)
)

// Decision is Plan's word on one request.
type Decision struct {
	Action  Action
	Score   int64     // Take: the slot claimed, server µs
	ShareAt time.Time // Take: its slot in the local share while sharing, on the runtime's clock (zero = none)
	Why     Why       // Fail: why
	At      time.Time // Fail with PastDeadline: the earliest its slot could come, local; Refuse: when it might fit (zero = not known)
	Limit   int       // Fail with TooMany or OverCap: the first limit in force
	Cap     int       // Fail with OverCap: the most its priority may take under the tightest limit in force
	// Take: where a store that places claims itself may put it (see
	// Claim).
	Floor, Last, Reach int64
}

// Why is why a request fails at once.
type Why uint8

// The reasons a request fails.
const (
	TooMany      Why = iota + 1 // more units than the first limit, lowered, allows
	OverCap                     // more units than its priority may take under the limits in force, lowered
	PastDeadline                // its slot cannot come before its deadline (see TooLate)
)

// PlanOut is a planned round.
type PlanOut struct {
	Each     []Decision // one per request, in queue order
	Claims   []Claim    // the claims, in queue order (First is the worker's to set)
	Checks   []int64    // distinct scores among the claims, ascending
	Exact    bool       // send as MULTI/EXEC, and learn upcoming slots
	Slots    int        // how many upcoming free slots to learn (0 = none)
	Soonest  int64      // the score of a call that goes when the reply is back
	Room     int        // units of the batch (or fair share) left unclaimed
	PrioMask uint8      // the priorities (a bit per level) of the requests claimed or kept
	// How long to sleep before the next round when nothing wakes the
	// worker sooner, and whether to add jitter (a wake-up for a slot
	// coming within reach: see Rules.Jitter).
	Sleep  time.Duration
	Jitter bool
}

// Plan picks the batch for the next round trip: requests from the head of
// the queue, each given the earliest free slot known for it, as long as
// that slot lies within the reserve-ahead horizon and the batch has room.
// A request whose slot would be after its deadline fails; an AllowN that
// cannot go now is refused. The slices of buf (the last round's plan) are
// reused.
func Plan(c *Rules, in PlanIn, reqs []Request, buf PlanOut) PlanOut {
	var p planner
	p.init(c, in, len(reqs), buf)
	for i, r := range reqs {
		p.place(i, r)
	}
	return p.finish(reqs)
}

// planner is one round's planning under way.
type planner struct {
	c   *Rules
	in  PlanIn
	out PlanOut

	room      int                     // units the batch may still take
	known     bool                    // slots come from the last reply
	pos       int                     // units placed against the known slots
	units     int                     // units of the requests claimed or kept so far
	full      bool                    // a WaitN waits: those behind it wait too
	short     int                     // the units of the first request the known slots were too few for (0: none)
	firstKept int                     // the first request left queued (-1 = none)
	maxNow    int                     // the largest AllowN claimed
	tenants   map[string]*tenantRound // by capped tenant's tag (nil: none)

	soonest, horizon, floor int64 // server µs
}

func (p *planner) init(c *Rules, in PlanIn, n int, buf PlanOut) {
	*p = planner{c: c, in: in, firstKept: -1, room: c.BatchUnits()}
	p.out.Each = slices.Grow(buf.Each[:0], n)[:n]
	clear(p.out.Each)
	p.out.Claims, p.out.Checks = buf.Claims[:0], buf.Checks[:0]
	// Far from the limit every call fits now: no slots to look up, and no
	// need for a transaction.
	p.out.Exact = in.Known.Near
	p.known = p.out.Exact && in.Known.Slots != nil
	// A call admitted now goes when the reply is back: score it then.
	p.soonest = in.Clock.Server(in.Now) + in.Clock.RTT
	p.out.Soonest = p.soonest
	p.horizon = p.soonest + c.Ahead.Microseconds()
	// No call goes before a shared pause ends.
	p.floor = max(p.soonest, in.PausedTill)
	if p.out.Exact {
		// Near the limit, other processes may be waiting for the same slots.
		p.room = min(p.room, c.Share(in.Clock.RTT))
	}
}

// place decides request i.
func (p *planner) place(i int, r Request) {
	d := &p.out.Each[i]
	switch {
	case r.N > p.in.Lims[0]:
		*d = Decision{Action: Fail, Why: TooMany, Limit: p.in.Lims[0]}
	case r.N > p.capOf(r.Prio):
		// Only a lowered limit gets here: WaitN and AllowN check n
		// against the caps under the configured limits.
		*d = Decision{Action: Fail, Why: OverCap, Limit: p.in.Lims[0], Cap: p.capOf(r.Prio)}
	case p.in.Hold:
		*d = p.placeHeld(r)
	case r.Now:
		*d = p.placeNow(r)
	default:
		*d = p.placeWait(r)
	}
	if d.Action == Keep || d.Action == Take {
		p.units += r.N
		p.out.PrioMask |= 1 << r.Prio
	}
	switch d.Action {
	case Keep:
		if p.firstKept < 0 {
			p.firstKept = i
		}
	case Take:
		p.room -= r.N
		p.claimedFor(r, d.Score)
		p.out.Claims = append(p.out.Claims, Claim{Score: d.Score, N: r.N, Prio: r.Prio, Floor: d.Floor, Last: d.Last, Reach: d.Reach})
		p.out.Checks = addCheck(p.out.Checks, d.Score)
	}
}

// placeHeld decides a request while the round may claim nothing (see
// margin.go): an AllowN is refused, a WaitN waits for the next round,
// which a clock sample precedes.
func (p *planner) placeHeld(r Request) Decision {
	if r.Now {
		return Decision{Action: Refuse}
	}
	if p.out.Sleep == 0 || p.out.Sleep > holdRetry {
		p.out.Sleep = holdRetry
	}
	return Decision{Action: Keep}
}

// holdRetry is how soon a round held for a tighter clock estimate tries
// again, after a clock sample.
const holdRetry = 10 * time.Millisecond

// placeNow decides an AllowN's request: a claim for the slot a call made
// when the reply is back would take, or a refusal without a round trip
// when a shared pause or the local share (just back from the throttler's
// FallbackLocal) already rules it out. Known slots do not refuse it: they
// may be stale, and one round trip tells.
func (p *planner) placeNow(r Request) Decision {
	in := p.in
	if p.floor > p.soonest {
		return Decision{Action: Refuse, At: in.Clock.Local(p.floor)}
	}
	if len(p.out.Claims) > 0 && r.N > p.room {
		return Decision{Action: Keep} // in the next round, at once
	}
	var shareAt time.Time
	if in.Sharing != nil {
		if r.N > in.Sharing.Limit {
			return Decision{Action: Refuse, At: in.ShareUntil}
		}
		if shareAt = in.Sharing.Slot(in.Runtime, r.N); shareAt.After(in.Runtime) {
			return Decision{Action: Refuse, At: in.fromRuntime(shareAt)}
		}
		in.Sharing.Take(shareAt, r.N)
	}
	if p.known {
		p.pos += r.N
	}
	p.maxNow = max(p.maxNow, r.N)
	// Now or never: a store that places claims may only confirm it.
	return Decision{Action: Take, Score: p.soonest, ShareAt: shareAt, Floor: p.soonest, Last: p.soonest, Reach: math.MaxInt64}
}

// reach returns how far ahead a call of priority prio may reserve (µs),
// and the latest score that allows. A priority held to a share of the
// limit reserves little ahead: slots it reserved ahead would fill the
// windows in which the higher priorities are to find their room, for a
// call is counted against its neighbourhood both ways (see admit), and
// they could only go after them.
func (p *planner) reach(prio Level) (ahead, horizon int64) {
	if p.c.Capped(prio) {
		ahead = p.c.CappedAhead(prio)
		return ahead, p.soonest + ahead
	}
	return p.c.Ahead.Microseconds(), p.horizon
}

// placeWait decides a WaitN's request: the earliest slot known for it,
// within this process's local share while sharing; or it waits, for the
// slots of the next reply or for its slot to come within reach.
func (p *planner) placeWait(r Request) Decision {
	in := p.in
	var slots []int64 // the free slots the last reply told of for r's priority
	if in.Known.Near {
		slots = in.Known.At(r.Prio)
	}
	if !r.Deadline.IsZero() {
		// What the last reply told may already rule its deadline out,
		// however many round trips it waits for (see Earliest).
		if at := in.Clock.Local(Earliest(p.c.Wins, in.Lims, slots, p.floor, p.units, r.N, in.Widen)); TooLate(at, r.Deadline) {
			return Decision{Action: Fail, Why: PastDeadline, At: at}
		}
	}
	soon := p.soon(r)
	g, ok := p.knownSlot(r, slots, soon)
	if !ok {
		return Decision{Action: Keep}
	}
	g, shareAt := p.withinShare(r, g)
	if !r.Deadline.IsZero() {
		if at := in.Clock.Local(g); TooLate(at, r.Deadline) {
			return Decision{Action: Fail, Why: PastDeadline, At: at}
		}
	}
	g, wait := p.tenantSlot(r, g, slots)
	if wait {
		return Decision{Action: Keep}
	}
	if !soon {
		p.pos += r.N
	}
	ahead, horizon := p.reach(r.Prio)
	// The share bounds what joins a batch, never its first claim: a
	// weighted call larger than the share must still get through.
	if p.full || g > horizon || (r.N > p.room && len(p.out.Claims) > 0) {
		if !p.full && len(p.out.Claims) == 0 && g > horizon {
			p.out.Sleep = in.Clock.Local(g - ahead).Sub(in.Now)
			// Spread the wake-ups of processes waiting for slots to come
			// within reach (over a span a quarter of reserve-ahead long,
			// too long for a capped priority's short reach).
			p.out.Jitter = !p.c.Capped(r.Prio)
		}
		p.full = true
		return Decision{Action: Keep}
	}
	d := Decision{Action: Take, Score: g, ShareAt: shareAt, Floor: p.floor, Last: horizon, Reach: horizon}
	if !r.Deadline.IsZero() {
		// The latest score whose slot is not too late (see TooLate).
		d.Last = min(d.Last, in.Clock.Server(r.Deadline.Add(-deadlineMargin)))
	}
	if !shareAt.IsZero() {
		in.Sharing.Take(shareAt, r.N)
		// Recorded in the local share at g: it goes at g or not at all.
		d.Floor, d.Last = g, g
	}
	return d
}

// knownSlot returns the earliest slot known for r (slots the known ones),
// or the floor when none are known or r goes soon (see soon); ok is false
// when r lies beyond what the last reply told, and waits to learn more.
func (p *planner) knownSlot(r Request, slots []int64, soon bool) (g int64, ok bool) {
	if !p.known || soon {
		return p.floor, true
	}
	if p.pos+r.N > len(slots) {
		p.full = true
		if p.pos == 0 && p.short == 0 {
			p.short = r.N
		}
		return 0, false
	}
	return max(p.floor, slots[p.pos+r.N-1]), true
}

// withinShare places r no earlier than g and, just back from the
// fallback (see the throttler's fallback.recoveredLocked), also within
// this process's share of the local window; shareAt is then the runtime's
// time its call is recorded at there.
func (p *planner) withinShare(r Request, g int64) (_ int64, shareAt time.Time) {
	in := p.in
	if in.Sharing == nil {
		return g, time.Time{}
	}
	if r.N > in.Sharing.Limit {
		return max(g, in.Clock.Server(in.ShareUntil)), time.Time{}
	}
	// Any time after the local slot fits it; record the call at the time
	// it will go.
	g = max(g, in.Clock.Server(in.fromRuntime(in.Sharing.Slot(in.Runtime, r.N))))
	return g, in.toRuntime(in.Clock.Local(g))
}

// finish completes the plan once every request is placed: how long a round
// that claims nothing sleeps, and what the round trip learns.
func (p *planner) finish(reqs []Request) PlanOut {
	c, in, out := p.c, p.in, &p.out
	out.Room = p.room
	if len(out.Claims) == 0 {
		// A quiet worker still makes a round trip at least every Rules.Quiet,
		// to learn of pauses, lowered limits and losses.
		out.Sleep = min(out.Sleep, c.Quiet())
		if in.Probe && in.QuietDue {
			out.Exact = true
		}
	}
	if p.maxNow > 0 {
		// An AllowN refused learns when it might fit; of two racing for
		// the last slot, exactly one wins.
		out.Exact = true
	}
	// A round whose callers wait for a slot it knows, or that only refused
	// AllowN calls without a round trip, sends the probe only when
	// Rules.Quiet has passed: the round that claims their slot carries it.
	// (The round right after a claim would otherwise learn again the slot
	// its reply told: a round trip per admission for calls held to a
	// share.)
	probe := in.Probe && in.QuietDue
	// A request the known slots were too few for waits to learn more,
	// whatever else the round sleeps for (a capped tenant's slot coming
	// within reach, see tenantWait): otherwise it, and every request
	// behind it, would wait for the next round that claims (seed 30688:
	// a call of 65 units behind 64 known slots, most of a window).
	if out.Exact && (len(out.Claims) > 0 || (p.firstKept >= 0 && (out.Sleep == 0 || p.short > 0)) || probe) {
		// A round near the limit claims at most a share; it learns a few
		// fair shares (see LearnShares), a share at least, and more than
		// a batch only costs Redis time (and, on a slow link, the bytes
		// of a longer reply).
		k := max(min(LearnShares*c.FairShare(), c.BatchUnits()), min(c.Share(in.Clock.RTT), c.BatchUnits()), p.maxNow)
		if p.firstKept >= 0 {
			k = max(k, reqs[p.firstKept].N, p.short)
		}
		out.Slots = min(slices.Min(in.Lims), k)
	}
	return *out
}

// capOf is the most units a call of priority prio may claim at once: its cap
// under the tightest limit in force.
func (p *planner) capOf(prio Level) int {
	return p.c.CapUnder(slices.Min(p.in.Lims), prio)
}

// addCheck adds score to the distinct, ascending scores checks (claims are
// planned in ascending score order, save AllowN's at soonest).
func addCheck(checks []int64, score int64) []int64 {
	if i, found := slices.BinarySearch(checks, score); !found {
		checks = slices.Insert(checks, i, score)
	}
	return checks
}

// Known is what the last reply told of the room ahead, for the next round
// to plan with. The throttler keeps it under its mu.
type Known struct {
	Slots []int64 // next free slots (server µs, 0 = now), when near
	Near  bool    // little room was left: reserve exactly (MULTI), learning slots
	// By level: the next free slots of a priority that may fill less than
	// the whole limit (see Rules.Capped), when learned.
	Capped [Levels][]int64
	// Turns lost in a row: rounds that claimed slots and got none (others
	// took them first). A process that lost more wakes for the next slots
	// ahead of those that lost fewer (see Rules.TurnJitter).
	Lost int
	// Announce is how many more rounds that claim slots near the limit
	// tell the other processes which slots they take (see News.Taken):
	// ContendedRounds after a lost turn, for a process that never loses
	// one has nobody to tell.
	Announce int
	// The tenants' shares, as the last scan of their calls told them.
	Tenants TenantShares
}

// LearnShares is how many fair shares of upcoming free slots a round near
// the limit learns, a batch at most: its own and the next ones, which the
// processes that announce their claims (see Known.Take) take from it
// without racing for the same.
const LearnShares = 8

// ContendedRounds is how many of its claiming rounds near the limit a
// process announces after it lost a turn (see Known.Announce).
const ContendedRounds = 64

// Forget drops the free slots k knows of, told under a pause or a limit
// that has changed since: the next round learns them again.
func (k *Known) Forget() { k.Near, k.Slots, k.Capped = true, nil, [Levels][]int64{} }

// Doubt notes that a round trip failed: what room is left is unknown, so
// the next round reserves exactly.
func (k *Known) Doubt() { k.Near = true }

// Learn takes the free slots a reply told of (see ResolveOut.Slots).
func (k *Known) Learn(o ResolveOut) { k.Slots, k.Capped = o.Slots, o.Capped }

// FreeAt is how many of the free slots k knows of are free at serverNow
// (server µs): those due by then. A slot is a unit of room under every
// limit the reply counted.
func (k *Known) FreeAt(serverNow int64) int {
	n, _ := slices.BinarySearch(k.Slots, serverNow+1)
	return n
}

// Claimed takes what a round that claimed slots found of the room left
// (see ResolveOut.Near): a round that claimed nothing says nothing of it.
func (k *Known) Claimed(o ResolveOut) { k.Near = o.Near }

// Turn notes how a round that claimed slots ended: it admitted some, or
// none and its calls claim again (a lost turn), after which its next
// ContendedRounds claiming rounds announce their slots when announce (the
// store did not place its claims: see Announce).
func (k *Known) Turn(admitted, lost, announce bool) {
	switch {
	case admitted:
		k.Lost = 0
	case lost:
		k.Lost++
		if announce {
			k.Announce = ContendedRounds
		}
	}
}

// Announcing reports whether a round that claims slots near the limit
// tells the other processes which (see Announce), and counts it.
func (k *Known) Announcing() bool {
	if k.Announce == 0 {
		return false
	}
	k.Announce--
	return true
}

// Take tells k that another process claims the slots at scores (one per
// unit): each stops being a known free slot, so that this process claims
// the next ones instead of racing for those and losing its turn. The slots
// are a hint either way: the next round's count decides. When waiting (a
// call of this process is queued for a slot) and the others take every
// slot it knew, it lost its turn as surely as by claiming them: Lost
// counts it, so that it wakes for the next slots ahead of those that lost
// fewer (see Rules.TurnJitter), as it would have had it raced them.
func (k *Known) Take(scores []int64, waiting bool) {
	had := len(k.Slots) > 0
	take := func(slots []int64) []int64 {
		if len(slots) == 0 {
			return slots
		}
		// A new array (slots may share its own with a reply's buffers), and
		// not nil when empty: every known slot taken, the next round
		// learns more rather than claim blind.
		out := make([]int64, 0, len(slots))
		i := 0
		for _, s := range slots {
			for i < len(scores) && scores[i] < s {
				i++
			}
			if i < len(scores) && scores[i] == s {
				i++ // one unit taken at s
				continue
			}
			out = append(out, s)
		}
		return out
	}
	scores = slices.Sorted(slices.Values(scores))
	k.Slots = take(k.Slots)
	for p := range k.Capped {
		if k.Capped[p] != nil {
			k.Capped[p] = take(k.Capped[p])
		}
	}
	if waiting && had && len(k.Slots) == 0 {
		k.Lost++
	}
}

// Free tells k that a call of n units admitted at score, of priority p,
// was given back without going (its caller gave up, or was woken too
// late): its slot is free again, at its score or, if that has passed, now,
// for the calls this process still has queued (a caller woken late takes
// it again at once, instead of a slot a window away). The slots are a
// hint, as every known slot is: the next round's count decides. Nothing
// changes while no slots are known (far from the limit every call fits,
// and with none learned the next round learns them).
func (k *Known) Free(score int64, n int, p Level) {
	free := func(slots []int64) []int64 {
		if slots == nil {
			return nil
		}
		i, _ := slices.BinarySearch(slots, score)
		// Clipped: slots may share its array with a reply's buffers.
		return slices.Insert(slices.Clip(slots), i, slices.Repeat([]int64{score}, n)...)
	}
	if k.Near {
		k.Slots = free(k.Slots)
		k.Capped[p] = free(k.Capped[p])
	}
}

// At returns the free slots known for calls of priority p: its own when
// learned, else those under the whole limit, which are no later.
func (k Known) At(p Level) []int64 {
	if s := k.Capped[p]; s != nil {
		return s
	}
	return k.Slots
}
