package throttler

import (
	"context"
	"time"
)

// store is everything the core asks of Redis, in the core's own terms: the
// seam behind which redisStore speaks go-redis, and through which a test can
// put a store that fails, delays or loses writes exactly where it wants.
// Every method is bounded by its context's deadline, whatever the client:
// redisStore returns at the deadline, or, where it leaves the client's own
// socket timeouts to end the call (see redisStore.inline), within one
// socket write and one socket read, each within those timeouts, of the
// later of the deadline and Redis's last answer. A context cancelled before
// its deadline ends a call under way at once only where redisStore runs it
// in a helper goroutine; go-redis itself sees a cancellation only while it
// waits for a connection, dials or backs off before a retry.
type store interface {
	// reserve sends one round's attempt (see attempt) and returns what it
	// read. An error means the attempt may or may not have been applied.
	reserve(ctx context.Context, a *attempt) (reply, error)
	// remove takes members out of every limit's key.
	remove(ctx context.Context, members []string) error
	// add puts members into every limit's key, counted as calls.
	add(ctx context.Context, members []entry) error
	// now reads the server's clock.
	now(ctx context.Context) (time.Time, error)
	// writeMeta writes a change to the members that are not calls, in the
	// first limit's key, and keeps the key alive at least ttl.
	writeMeta(ctx context.Context, m metaWrite, ttl time.Duration) error
	// usage reads every limit's window without changing it (see Usage);
	// limits gives the limits in force from the server's clock and the
	// pause, limit and limit-end members, as read first.
	usage(ctx context.Context, limits func(now int64, meta []float64) []int) (usageRead, error)
	// releaseLeases takes places in flight back and wakes, for each, the
	// next process in the line for one (see WithInFlight); pass wakes that
	// many more, for wakes this process had no use for.
	releaseLeases(ctx context.Context, ids []string, pass int) error
	// renewLeases moves the expiry of places still held to expiry (server
	// µs).
	renewLeases(ctx context.Context, ids []string, expiry int64) error
	// watchLeases subscribes to the releases of places in flight.
	watchLeases() *subscription
	// watchNews subscribes to the news published on channel (see news.go).
	watchNews(channel string) *subscription
	// readMeta reads the pause and the lowered limit.
	readMeta(ctx context.Context) (reply, error)
	// liveLeases counts the places in flight taken now, by the server's
	// clock.
	liveLeases(ctx context.Context) (int, error)
}

// attempt is one reservation round trip. For each limit (window) of the
// Throttler, on its key, it gives back rejected members, adds new members at
// the scores they would be admitted at, counts the neighbourhood of each new
// score, and, near the limit, reads the upcoming free slots; on the first
// limit's key it also reads the members that are not calls (the marker, a
// shared pause, a lowered limit) and checks that Redis still holds the
// window (see journal and marker). redisStore sends it as:
//
//	MULTI                                       (exact attempts only)
//	EVAL <wideScript> key <margin> <how long>   (a round with a margin: see margin.go)
//	ZREM key <given back>...                    (when there are any)
//	ZREMRANGEBYSCORE key 0 (<now-w-1s>          (every 100ms, or a twentieth
//	ZREMRANGEBYSCORE key (<now+1h> +inf          of the shortest window; see trimEvery)
//	ZADD key <g1> <m1> <g1> <m2> ... [-1 <marker>]
//	ZCOUNT key (<g-w> (<g+w>                    (once per distinct score g)
//	ZRANGE key -(limit+extra) -(limit-k+1) WITHSCORES   (exact attempts only)
//	PEXPIRE key <ttl>                           (at most every second, and on a new key)
//	... the same for the key of every other limit (WithLimit) ...
//	ZMSCORE key <marker> <pause> <limit> <limit-end> <wide> <wide-end> <our newest member>
//	TIME                                        (at most every 250ms)
//	EXEC                                        (exact attempts only)
//
// Adding before counting makes the decision safe without atomicity, as in the
// seed design: two clients adding at once each count the other, so a race can
// only refuse a call that would have fitted, never admit one too many. Far
// from the limit, where such races cost nothing, an attempt is a plain
// pipeline of ZADD, ZCOUNT and ZMSCORE. Near the limit, MULTI buys exactness
// and progress: the count sees exactly the state its own insert produced, so
// of two callers racing for the last slot exactly one wins, and the free
// slots read (for waiters to reserve without polling) agree with that count.
type attempt struct {
	remove   []string
	adds     []entry
	checks   []int64 // distinct scores among adds
	lims     []int   // the limit in force per window
	slots    int     // k: how many upcoming free slots to learn (0 = none)
	prioMask uint8   // the priorities (a bit per level) of its claims and of the calls still waiting
	// By level, for the priorities in prioMask that may fill less than the
	// highest (see WithPriorityShare): their cap per window, whose free
	// slots the round trip learns too (when slots > 0). Empty otherwise.
	lowCaps [levels][]int
	exact   bool // MULTI/EXEC; otherwise a plain pipeline
	clock   bool // include TIME

	// Trims, when trim is set: members scored before trimAt-w-trimSlack
	// (trimAt is the server's last reading of its clock, never ahead of
	// it), and after futureAt.
	trim             bool
	trimAt, futureAt int64

	expire bool            // include PEXPIRE
	ttl0   time.Duration   // the first key's TTL (longer during a pause)
	ttls   []time.Duration // per window, filled in when sent

	soonest int64  // the score of a call that goes as soon as the reply is back
	probe   string // a member of ours that must still be in the set ("" = none)
	mark    bool   // write the marker
	pause   int64  // server µs: write a shared pause until then (a heal; 0 = none)
	room    int    // units of the batch (or fair share) left unclaimed
	// The generation of the clock estimate the scores were computed with
	// (see clockView and clockSync.since).
	clockGen uint64

	// The margin (see margin.go): the round's own, published before its
	// members are added when it is positive and the round adds any; how
	// much wider than each window its counts reach, each way; the largest
	// margin in force it counted with (its own or one published); and how
	// long its own stays in force (µs). hold: the round claims nothing
	// until the clock estimate is tighter.
	margin, widen, wideUsed, wideFor int64
	hold                             bool

	// Places in flight asked for (WithInFlight), in batch order: the
	// round trip grants the first ones that fit (see leaseScript).
	leases     []string
	leaseWakes uint64 // wakes heard when the attempt was planned
	leaseReady bool   // subscribed then: every later wake is heard
	leaseStay  bool   // waiters stay parked: keep this process in the line for places
}

// reply is what an attempt's round trip returned.
type reply struct {
	counts [][]int64 // per window, per check
	tails  [][]entry // per window
	// By level, per window: the tails read for the attempt's lowCaps.
	lowTails [levels][][]entry
	lost     bool // the probe member is gone: Redis lost the window
	// The clock sample showed a clock step: the attempt's scores came
	// from an estimate now known wrong, so its counts decide nothing.
	stepped bool
	noMark  bool // the marker member was missing before this attempt wrote it
	// The server's clock as the round trip read it (zero = not read).
	serverTime time.Time
	// The members that are not calls, in server µs (0 = absent): the
	// pause, the lowered limit and its end, the largest margin published
	// and its end.
	pause, limit, limitEnd int64
	wide, wideEnd          int64
	// How many of the places asked for were granted (the first ones), and
	// when the earliest live lease expires (server µs, 0 = none).
	leaseGranted  int
	leaseEarliest int64
}

// usageRead is what store.usage read: the server's clock, the pause, limit
// and limit-end members (server µs, negated as stored), and per limit the
// calls counting now, those scored after now, and the member whose leaving
// frees the next slot.
type usageRead struct {
	server   time.Time
	meta     []float64
	used     []int
	debt     []int
	reserved []int
	nth      [][]entry
	lims     []int
}
