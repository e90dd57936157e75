package core

import "time"

// Attempt is one reservation round trip, as the core plans it. For each
// limit (window) of the Throttler, on its key, it gives back rejected
// members, adds new members at the scores they would be admitted at,
// counts the neighbourhood of each new score, and, near the limit, reads
// the upcoming free slots; on the first limit's key it also reads the
// values kept beside the calls (the marker, a shared pause, a lowered
// limit, the margin in force), and in the longest window's key it checks
// that the store still holds the window (Loss.Probes). A store applies it in
// one round trip; Reply is what it read.
//
// Adding before counting makes the decision safe without atomicity: two
// clients adding at once each count the other, so a race can only refuse a
// call that would have fitted, never admit one too many. Exact attempts
// (near the limit) are applied atomically: the count sees exactly the
// state its own insert produced, so of two callers racing for the last
// slot exactly one wins, and the free slots read agree with that count.
type Attempt struct {
	Adds   []Entry  // members to add: the round's claims, and replays
	Checks []int64  // distinct scores among Adds
	Lims   []int    // the limit in force per window
	Learn  Learning // what the round trip learns of the free slots
	Exact  bool     // MULTI/EXEC; otherwise a plain pipeline
	Clock  bool     // include TIME
	Removals
	Upkeep
	Planned
	Riders
}

// Removals are the members an attempt takes out of every key.
type Removals struct {
	Remove []string // members to remove: calls that did not go, and what a failed round trip may have written
	// Members to remove that a round trip that succeeded wrote, at their
	// scores: in a compacted window, one a compaction already moved leaves
	// its bucket (see the redisstore package's GiveBackScript). Nothing
	// else may remove them first: one found gone from the set counts as
	// moved, and its bucket would lose another call's count.
	GiveBack []Entry
}

// Upkeep is what an attempt does to keep the keys tidy and alive.
type Upkeep struct {
	Trim   Trim
	Expire Expiry
}

// Planned is what the plan knew when it made the attempt, for reading
// its reply.
type Planned struct {
	Soonest int64 // the score of a call that goes as soon as the reply is back
	Room    int   // units of the batch (or fair share) left unclaimed
	// The generation of the clock estimate the scores were computed with
	// (see ClockView.Gen).
	ClockGen uint64
}

// Riders are what the optional mechanisms add to an attempt, each in a
// type of its own (the reply's part is RiderReply): a mechanism that is
// off leaves its zero value, which a store applies as nothing.
type Riders struct {
	Loss   LossChecks // what tells a lost window, and what a heal writes (the throttler's heal.go)
	Margin Margin     // the margin counted with and published (margin.go)
	Places PlaceAsk   // places in flight asked for (WithInFlight)
	// Taken, when set, is published with the claims, in their round trip:
	// the scores they claim, one per unit (see News.Taken).
	Taken   []int64
	Tenants TenantAsk // the tenants' calls to count (see tenants.go)
	Placement
}

// Placement lets the store place the round's claims itself, where it
// finds room when it applies the attempt, rather than at the scores of
// Adds, which were worked out from free slots a round trip old (see Claim
// for where each may go). Claims are the round's claims, their members
// Adds[First:First+N]; Caps holds, for each level of a claim, its cap
// under each window's limit in force. A store that cannot place them (a
// window it reads compacted) adds them at their scores, and says so by
// leaving RiderReply.Placed nil.
type Placement struct {
	Place  bool
	Claims []Claim
	Caps   [Levels][]int
	Again  bool // sent again (see Resent)
}

// Resent makes a ready to be sent again after its round trip failed,
// when it may have been applied (see redisstore.Transient): every write of
// an attempt but one is idempotent, or applied by a script only while the
// state it finds calls for it, so that a second application changes
// nothing the first did not (members added again at the same scores,
// removals, trims, a compaction that finds the calls it moved gone, a
// lease already granted, the largest margin, the earliest pause); the
// one that is not, a give-back that drops a compacted call's count from
// its bucket, is not sent again at all when a key may be read compacted
// (compacts: a window compacts, or another process compacts a key;
// otherwise it was a plain removal, and goes as one again): a second application would drop
// it twice, and a plain removal sent instead could reach Redis before the
// first request, still on its way, whose script would then find the
// member gone, take it for compacted, and drop another call from its
// bucket (TestGiveBackResentBeforeItsLateFirstSend: 8 calls in a window
// of 5). A give-back the first application did not make leaves its calls
// counted until they leave the window: capacity lost, never the limit.
// The reads of a resent attempt see its own members once, as
// the first application left them, and whatever others wrote since: each
// counted this attempt's members, so the resend can refuse a claim the
// first application would have admitted, never admit one it refused.
// Claims the store places (Place) that the first application placed keep
// their scores (Again tells the store to look).
func (a *Attempt) Resent(compacts bool) {
	if !compacts {
		// No key may be read compacted: each give-back was a plain removal.
		for _, e := range a.GiveBack {
			a.Remove = append(a.Remove, e.Member)
		}
	}
	a.GiveBack = nil
	a.Riders.resent()
}

// Learning is what a round trip learns of the free slots ahead.
type Learning struct {
	Slots    int   // k: how many upcoming free slots to learn (0 = none)
	PrioMask uint8 // the priorities (a bit per level) of the round's claims and of the calls still waiting
	// By level, for the priorities in PrioMask that may fill less than the
	// whole limit (see Rules.Capped): their cap per window, whose free
	// slots the round trip learns too (when Slots > 0). Empty otherwise.
	LowCaps [Levels][]int
}

// Trim is the trim a round trip makes, when On: of the members scored
// more than a window and TrimSlack before the server's clock as the trim
// runs, and of those more than FutureBound past it.
type Trim struct {
	On bool
}

// Expiry is the TTL a round trip sets on its keys, when On (PEXPIRE).
type Expiry struct {
	On    bool
	First time.Duration   // the first key's TTL (longer during a pause)
	TTLs  []time.Duration // per window, filled in when sent
}

// LossChecks let a reply show that Redis lost the window (see the
// throttler's heal.go), and carry what a heal still writes.
type LossChecks struct {
	// Members of ours that must still be in the longest window's key, at
	// their scores (a compacted window may have moved one into its
	// bucket); Member "" = none. The first is the newest; the second, when
	// a check could not tell, an older one (see the throttler's heal.go).
	Probes [2]Entry
	Mark   bool  // write the marker
	Pause  int64 // server µs: write a shared pause until then (a heal; 0 = none)
	// The first key's tally (the round trips that added to it) as the
	// replies that arrived before this attempt was planned left it: a
	// reply that finds less shows a copy that missed writes.
	Tally int64
}

// Margin is a round's margin (see margin.go and Rules.SetMargin): its own
// (Own), published before its members are added when it is positive and
// the round adds any; how much wider than each window its counts reach,
// each way (Widen); the largest margin in force it counted with, its own
// or one published (Used); and how long its own stays in force (For, µs).
// Hold: the round claims nothing until the clock estimate is tighter.
type Margin struct {
	Own, Widen, Used, For int64
	Hold                  bool
}

// PlaceAsk is the places in flight a round asks for (WithInFlight), in
// batch order: the round trip grants the first ones that fit.
type PlaceAsk struct {
	IDs   []string
	Wakes uint64 // wakes heard when the attempt was planned
	Ready bool   // subscribed then: every later wake is heard
	Stay  bool   // waiters stay parked: keep this process in the line for places
	// When the attempt was planned, on the runtime's clock: a place it
	// grants lives in Redis at least until At plus the ttl (the script
	// reads the server's clock later).
	At time.Time
}

// Reply is what an attempt's round trip returned.
type Reply struct {
	Counts [][]int64 // per window, per check: the members in (g-w, g+w)
	// Per window, per check g, read by exact attempts under several
	// limits only (nil otherwise): the most members, not the attempt's
	// own, in any one window (t-w, t] that holds g; -1 where the count
	// decides as well: within the limit in force, or no other member after
	// g. The neighbourhood's count bounds every such window, but it adds
	// up members on both sides of g that no one window holds together.
	Peaks [][]int64
	Tails [][]Entry // per window
	// By level, per window: the tails read for the attempt's Learn.LowCaps.
	LowTails [Levels][][]Entry
	// The clock sample showed a clock step: the attempt's scores came
	// from an estimate now known wrong, so its counts decide nothing.
	Stepped bool
	// The server's clock as the round trip read it (zero = not read).
	ServerTime time.Time
	// The members that are not calls, in server µs (0 = absent): the
	// Pause, the lowered Limit and its end.
	Meta
	RiderReply
}

// RiderReply is what a round trip read for the optional mechanisms
// (see Riders).
type RiderReply struct {
	Gone   [2]bool // per probe (Attempt.Loss.Probes): the member is gone
	NoMark bool    // the marker member was missing before this attempt wrote it
	// The first key's tally as the round trip found it, before its own
	// increment (0: missing), and whether it incremented it (it added).
	Tally   int64
	Tallied bool
	// The largest margin published and its end (server µs, 0 = absent).
	Wide, WideEnd int64
	// How many of the places asked for were granted (the first ones), and
	// when the earliest live lease expires (server µs, 0 = none).
	LeaseGranted  int
	LeaseEarliest int64
	// Per claim of an attempt whose store placed them (Placement), its
	// score, or 0 when no room lay between its Floor and its Last (its
	// members were not added); nil when the store did not place the
	// claims.
	Placed []int64
	// Per tenant in the window, its calls, when the attempt asked
	// (Tenants.Scan); per capped tenant of Tenants.Caps, its claims
	// refused and its members.
	Tenants   []TenantUse
	LightPeak int // the most calls of tenants none of whose calls waited in a window (see TenantAsk)
	Caps      []CapRead
}

// UsageRead is what a store's Usage read: the server's clock, the pause
// and the lowered limit, and per limit the
// calls counting now, those scored after now, and the member whose leaving
// frees the next slot.
type UsageRead struct {
	Server   time.Time
	Meta     Meta
	Used     []int
	Debt     []int
	Reserved []int
	Nth      [][]Entry
	Lims     []int
}

// Levels is the number of priorities: a Level is 0..Levels-1, lowest
// first.
const Levels = int(High) + 1

// Round is one round from plan to outcome, as the worker carries it: the
// requests it planned from, the plan, the attempt the plan sends, the
// reply, and the outcome resolved from it. A worker keeps one and reuses
// its slices from round to round.
type Round struct {
	Reqs    []Request
	Plan    PlanOut
	Attempt *Attempt
	Reply   Reply
	Outcome ResolveOut
}
