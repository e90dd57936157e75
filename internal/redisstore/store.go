package redisstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// Store is the store on a go-redis client: every limit's sorted set,
// the first of which also holds the members that are not calls.
type Store struct {
	rdb      redis.UniversalClient
	wins     []core.Window
	metaArgs []any // ZMSCORE key marker pause limit limit-end wide wide-end bucketed, boxed once
	// Per window: it counts its buckets too, for it compacts
	// (core.Window.Bucket) or its flag (BucketMember) was seen.
	compacted []atomic.Bool
	// Per compacted window: the copy of its buckets this process counts
	// with (nil: none yet, or it went stale), see buckets.go.
	copies []atomic.Pointer[bucketCopy]
	// Per window: the bucket width its hash was last found with (at
	// first, its own), which names the fields a copy takes.
	width []atomic.Int64
	// Per window: its last compaction moved a whole batch (CompactBatch),
	// so the next round trip compacts again, trimming or not.
	behind []atomic.Bool
	// Per window: the calls this process added since its last compaction:
	// from core.Window.Keep on, the next round trip compacts, so that a
	// burst leaves at most about Keep members per process behind the
	// newest Keep.
	added   []atomic.Int64
	probeIn int            // the index of the key the probe is looked up in
	lease   *core.InFlight // WithInFlight's, or nil
	self    string         // this Throttler's name in the line for places in flight
	// The client ends a call at its context's deadline by itself (see
	// inline).
	ctxTimeouts bool
	// The longer of the client's socket read and write timeouts when it is
	// a *redis.Client that sets both, else 0 (see socketTimeout): a call
	// with at least that long left before its deadline runs in the
	// caller's goroutine (see inline).
	ioTimeout time.Duration
	// PlaceScript ran here (see place.go): rounds call it by its digest,
	// rather than send its text, until the server says it lost it.
	placeLoaded atomic.Bool
}

// NewStore returns the Store on c for the limits wins (wins[0] is the
// first limit, whose key holds the members that are not calls): the probe
// is looked up in the key of wins[probeIn], lease is WithInFlight's places
// (nil without), and self names this Throttler in the line for places.
func NewStore(c redis.UniversalClient, wins []core.Window, probeIn int, lease *core.InFlight, self string) *Store {
	s := &Store{
		self:        self,
		rdb:         c,
		wins:        wins,
		probeIn:     probeIn,
		lease:       lease,
		metaArgs:    []any{"zmscore", wins[0].Key, Marker, PauseMember, LimitMember, LimitEndMember, WideMember, WideEndMember, BucketMember},
		compacted:   make([]atomic.Bool, len(wins)),
		copies:      make([]atomic.Pointer[bucketCopy], len(wins)),
		width:       make([]atomic.Int64, len(wins)),
		behind:      make([]atomic.Bool, len(wins)),
		added:       make([]atomic.Int64, len(wins)),
		ctxTimeouts: HonoursContext(c),
		ioTimeout:   SocketTimeout(c),
	}
	for i, x := range wins {
		s.compacted[i].Store(x.Bucket > 0)
		s.width[i].Store(x.Bucket)
	}
	return s
}

// Reserve applies one attempt in one round trip and returns what it read.
// An error means the attempt may or may not have been applied. It sends:
//
//	MULTI                                (exact attempts, and those with
//	                                      calls written for sure to give
//	                                      back: see pipelined)
//	EVAL <LeaseScript> <lease keys> ...  (places in flight asked for)
//	EVAL <WideScript> key <margin> ...   (a round that publishes a margin)
//	ZREM key <given back>...             (when there are any)
//	EVAL <GiveBackScript> key <buckets>  (calls written for sure given
//	                                      back, on a compacted window: see
//	                                      giveback.go; ZREM on the others)
//	EVAL <CompactScript> key <buckets>   (when the attempt trims a
//	                                      compacted window, or its last
//	                                      compaction moved a whole batch,
//	                                      or this process added Keep calls
//	                                      since: see compact.go)
//	ZREMRANGEBYSCORE key 0 (<t-w-1s>     (when the attempt trims: t is the
//	ZREMRANGEBYSCORE key (<now+1h> +inf   server's last TIME)
//	ZADD LT key -<end> <pause>           (a heal: first key only, with the
//	PUBLISH key <news>                    news of its pause)
//	ZADD key <g1> <m1> <g1> <m2> ... [-1 <marker>]
//	ZCOUNT key (<g-w> (<g+w>             (once per distinct score g)
//	EVAL <PeakScript> key <w> <g>...     (instead, in exact attempts with
//	                                      several limits)
//	EVAL <PlaceScript> <keys> ...        (instead of the claims' ZADD, the
//	                                      ZCOUNTs and the peaks, once for
//	                                      every key after their writes, in
//	                                      exact attempts that let the
//	                                      store place their claims while
//	                                      every window is read as a log:
//	                                      see place.go)
//	ZRANGE key -(limit+adds) -(limit-k+1) WITHSCORES
//	                                     (rounds that learn k slots: once
//	                                      more per capped priority's cap)
//	ZMSCORE key <epoch> <bucketed>       (a compacted window after the
//	                                      first, not the probes', with a
//	                                      copy of its buckets, in rounds
//	                                      that learn no slots: see
//	                                      buckets.go)
//	EVAL <CountScript> key <buckets> ... (a compacted window in rounds that
//	                                      learn slots, or one whose flag
//	                                      was seen: in place of the
//	                                      ZCOUNTs, the peaks and the tails)
//	ZMSCORE key <bucketed>               (keys after the first that are
//	                                      read as a log, not compacted)
//	ZADD key -1 <keeper>                 (keys after the first, with their
//	                                      PEXPIRE: see KeeperMember)
//	PEXPIRE key <ttl>                    (a second after the last, on a new
//	                                      key, and with a heal's pause)
//	... the same for the key of every other limit (WithLimit) ...
//	PUBLISH <news channel> t <name> <g>...  (exact attempts that announce
//	                                      the slots they claim: see
//	                                      core.Known.Announce)
//	ZMSCORE key <marker> <pause> <limit> <limit-end> <wide> <wide-end> <bucketed> [<probes>] [<epoch>]
//	                                     (the epoch when the first window
//	                                      counts from a copy)
//	ZMSCORE <longest key> <bucketed> [<probes>] [<epoch>]
//	                                     (the longest window not the first,
//	                                      unless compacted with neither
//	                                      probes nor a copy, or read by
//	                                      CountScript, which reads the
//	                                      probes)
//	TIME                                 (250ms after the last; on every
//	                                      round trip while the estimate
//	                                      is unsampled or loose, or the
//	                                      local clock not monotonic)
//	ZMSCORE key <epoch> <bucketed>       (per compacted window read
//	HMGET <buckets> b lo hi n base cut <k>...
//	                                      without CountScript that has no
//	                                      copy of its buckets, or compacts;
//	                                      and with a recount: see
//	                                      buckets.go)
//	EXEC                                 (with MULTI)
//
// Adding before counting makes the decision safe without atomicity: two
// clients adding at once each count the other, so a race can only refuse
// a call that would have fitted, never admit one too many. Far from the
// limit, where such races cost nothing, an attempt is a plain pipeline of
// ZADD, ZCOUNT and ZMSCORE. Near the limit, MULTI buys exactness and
// progress: the count sees exactly the state its own insert produced, so
// of two callers racing for the last slot exactly one wins, and the free
// slots read (for waiters to reserve without polling) agree with that
// count. A reply that shows the flag of a key read as a log (another
// process compacts it) costs a second round trip, which reads that key
// again with CountScript (see recount); so does a compacted key read
// without it whose copy of its buckets went stale, or a probe missing
// from its set but not before its cut (see bucketReply).
func (s *Store) Reserve(ctx context.Context, a *core.Attempt) (core.Reply, error) {
	cmds := &attemptCmds{s: s, a: a}
	err := s.bounded(ctx, func(ctx context.Context) error {
		var err error
		cmds.ctx = ctx
		var done []redis.Cmder
		done, err = s.pipelined(a.Exact || len(a.GiveBack) > 0)(ctx, cmds.queue)
		if err != nil && cmds.scriptLost(done) {
			err = nil // its claims go unplaced (see place.go)
		}
		return err
	})
	if err != nil {
		return core.Reply{}, err
	}
	r, err := cmds.reply()
	if err != nil {
		return core.Reply{}, err
	}
	late := cmds.flagged()
	for _, wi := range cmds.again {
		if !slices.Contains(late, wi) {
			late = append(late, wi)
		}
	}
	if len(late) > 0 {
		err = s.recount(ctx, a, late, &r)
	}
	return r, err
}

// recount reads again, with CountScript, the windows of attempt a that its
// round trip found compacted by another process (their flag set), or could
// not read without the script (see bucketReply), and puts their counts,
// tails and probes into r; from now on they are read as compacted. The attempt's members were added before, so the recount, like every
// count, sees whatever any process admitted that could not see them.
func (s *Store) recount(ctx context.Context, a *core.Attempt, late []int, r *core.Reply) error {
	c := &attemptCmds{s: s, a: a, win: make([]winCmds, len(s.wins)), recounting: true}
	err := s.bounded(ctx, func(ctx context.Context) error {
		c.ctx = ctx
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, wi := range late {
				s.compacted[wi].Store(true)
				c.queueReads(p, wi)
			}
			c.queueCopies(p)
			return nil
		})
		return err
	})
	if err != nil {
		return err
	}
	for _, wi := range late {
		if err := c.winReply(r, wi); err != nil {
			return err
		}
		if cp := c.win[wi].take; cp.epoch != nil {
			s.copies[wi].Store(cp.taken(&s.width[wi])) // nil when it could not be taken
		}
	}
	return nil
}

// attemptCmds are the commands of one attempt's round trip, queued on a
// pipeline (see Reserve for the sequence), and read back into a reply.
type attemptCmds struct {
	s   *Store
	a   *core.Attempt
	ctx context.Context // the round trip's
	win []winCmds       // per window
	// The probe is read by the CountScript of its window (compacted), not
	// with the meta members.
	probeCounted bool
	recounting   bool  // every compacted window is read with CountScript
	epochAt      int   // where the meta members' answer holds the first window's epoch
	probeEpochAt int   // where the probes' ZMSCORE holds their window's epoch (0: not there)
	again        []int // compacted windows read without it, to read with it (see buckets.go)
	clock        *redis.TimeCmd
	meta         *redis.FloatSliceCmd
	probe        *redis.FloatSliceCmd // ZMSCORE <probe key> bucketed [probe], when not in meta
	leases       *redis.Cmd           // the lease script's, when places were asked for
	placing      bool                 // the claims go to PlaceScript (see place.go)
	place        *redis.Cmd           // its answer
}

// winCmds are one window's reads in an attempt's round trip: its counts
// (ZCOUNT per check, or the peak script, or for a compacted window the
// count script, which also reads the tails), its tails, and its flag.
type winCmds struct {
	counts []*redis.IntCmd
	peak   *redis.Cmd
	count  *redis.Cmd // CountScript's
	// A compacted window read without CountScript (see buckets.go): the
	// copy of its buckets it counts with (nil: the one taken in this round
	// trip), the epoch read after its counts (in the first key's ZMSCORE
	// for the first window), and the reads of a new copy.
	copied   *bucketCopy
	epoch    *redis.FloatSliceCmd
	take     copyCmds
	bucketed bool // read as a compacted window: with its buckets
	plain    bool // read without CountScript
	tails    *redis.ZSliceCmd
	// By level: the tail for the attempt's Learn.LowCaps.
	lowTails [core.Levels]*redis.ZSliceCmd
	flag     *redis.FloatSliceCmd // ZMSCORE key bucketed (windows after the first, not compacted, not the probe's)
	compact  *redis.Cmd           // CompactScript's, when it runs
}

// queue queues the attempt's commands on p: the lease script (when places
// are asked for), then the sequence Reserve lists: the margin, every
// limit's key in turn (its writes, its reads, its PEXPIRE), and the meta
// reads last.
func (c *attemptCmds) queue(p redis.Pipeliner) error {
	s, a := c.s, c.a
	c.win = make([]winCmds, len(s.wins))
	zs := c.members()
	c.queueLeases(p)
	if a.Margin.Own > 0 && len(a.Adds) > 0 {
		// Before any member is added: a round that counts after them
		// reads the margin it must count with (see internal/core's margin.go).
		WideScript.Eval(c.ctx, p, []string{s.wins[0].Key}, a.Margin.Own, a.Margin.For, WideMember, WideEndMember)
	}
	var remove []any
	if len(a.Remove) > 0 {
		remove = toAny(a.Remove)
	}
	expire := func(wi int) {
		if a.Expire.On {
			if wi > 0 {
				p.ZAdd(c.ctx, s.wins[wi].Key, redis.Z{Score: float64(MetaScore(1)), Member: KeeperMember})
			}
			p.PExpire(c.ctx, s.wins[wi].Key, a.Expire.TTLs[wi])
		}
	}
	if c.placing = c.placeable(); c.placing {
		// Every key's writes, then the claims placed and counted in every
		// key at once, then the reads (see place.go).
		for wi := range s.wins {
			c.queueWrites(p, wi, zs, remove)
		}
		c.place = c.queuePlace(p)
		for wi := range s.wins {
			c.queueReads(p, wi)
			expire(wi)
		}
	} else {
		for wi := range s.wins {
			c.queueWrites(p, wi, zs, remove)
			c.queueReads(p, wi)
			expire(wi)
		}
	}
	if len(a.Taken) > 0 && !c.placing {
		// After the claims' ZADDs: a process that hears it and counts
		// finds them.
		p.Publish(c.ctx, NewsChannel(s.wins[0].Key), core.News{Taken: a.Taken, From: s.Name()}.String())
	}
	c.queueMeta(p)
	return nil
}

// members returns the attempt's adds as go-redis members, followed by the
// marker when the attempt writes it: the first len(a.Adds) are the adds.
func (c *attemptCmds) members() []redis.Z {
	a := c.a
	zs := make([]redis.Z, len(a.Adds), len(a.Adds)+1)
	for i, e := range a.Adds {
		zs[i] = redis.Z{Score: float64(e.Score), Member: e.Member}
	}
	if a.Loss.Mark {
		zs = append(zs, redis.Z{Score: float64(MetaScore(1)), Member: Marker})
	}
	return zs
}

// queueWrites queues the writes to the key of window wi: the removal of
// remove (when not nil) and of the attempt's GiveBack, the compaction and
// the trim (when the attempt trims), the pause and its news (first key
// only), and the add of zs (the marker in the first key only).
func (c *attemptCmds) queueWrites(p redis.Pipeliner, wi int, zs []redis.Z, remove []any) {
	a, ctx, x := c.a, c.ctx, c.s.wins[wi]
	if remove != nil {
		p.ZRem(ctx, x.Key, remove...)
	}
	if len(a.GiveBack) > 0 {
		c.s.queueGiveBack(ctx, p, wi, a.GiveBack)
	}
	trim := a.Trim.On && a.Trim.At > 0
	if x.Bucket > 0 {
		many := x.Keep > 0 && c.s.added[wi].Load() >= x.Keep
		if c.s.behind[wi].Swap(false) || trim || many {
			c.s.added[wi].Store(0)
			c.win[wi].compact = c.queueCompact(p, x)
		}
	}
	if trim {
		p.ZRemRangeByScore(ctx, x.Key, trimFloor, exclusive(a.Trim.At-x.W-core.TrimSlack))
		p.ZRemRangeByScore(ctx, x.Key, exclusive(a.Trim.Future), "+inf")
	}
	if wi == 0 && a.Loss.Pause > 0 {
		// Before the marker: a marker present means the pause written
		// with it is there too. Every replica listening hears of it.
		p.ZAddLT(ctx, x.Key, redis.Z{Score: float64(MetaScore(a.Loss.Pause)), Member: PauseMember})
		p.Publish(ctx, NewsChannel(x.Key), core.News{Pause: a.Loss.Pause}.String())
	}
	add := zs
	if wi > 0 {
		add = zs[:len(a.Adds)] // the marker lives in the first key only
	}
	if c.placing {
		add = c.unplaced(add)
	}
	if len(add) > 0 {
		p.ZAdd(ctx, x.Key, add...)
		if x.Bucket > 0 {
			c.s.added[wi].Add(int64(len(add)))
		}
	}
}

// queueCompact queues CompactScript on compacted window x: its buckets are
// kept while a window that a check may still count (widened by the widest
// margin) overlaps them, and as long the hash and the flag live.
func (c *attemptCmds) queueCompact(p redis.Pipeliner, x core.Window) *redis.Cmd {
	keep := x.W + core.TrimSlack + core.MaxSpread
	ttl := keep/1000 + 1000 // ms
	return CompactScript.Eval(c.ctx, p, []string{x.Key, CompactKey(x.Key)}, x.Bucket, x.Age, keep, ttl, BucketMember, CompactBatch, RebuildFrom, x.Keep, EpochMember, DenseBucket)
}

// queueReads queues the reads of the key of window wi, after its writes:
// per checked score g, the members in (g-w, g+w) with w the window widened
// by a.Widen (the peak script instead, for exact attempts with several
// limits), then, when the attempt asks for slots, the tails under the
// limit in force and under each priority's cap. A compacted window counts
// its buckets too: without tails, with one HMGET after the ZCOUNTs (see
// buckets.go), else all of it with one CountScript.
func (c *attemptCmds) queueReads(p redis.Pipeliner, wi int) {
	s, a, x, wc := c.s, c.a, c.s.wins[wi], &c.win[wi]
	w := x.W + a.Margin.Widen
	if s.compacted[wi].Load() {
		wc.bucketed = true
		if !c.recounting && a.Learn.Slots == 0 {
			// Without tails, no script: see buckets.go. The probe is
			// looked up with the others (queueMeta).
			for _, g := range a.Checks {
				wc.counts = append(wc.counts, p.ZCount(c.ctx, x.Key, exclusive(g-w), exclusive(g+w)))
			}
			if len(a.Checks) == 0 && (wi != s.probeIn || len(c.probes()) == 0) {
				return // nothing to count
			}
			wc.plain = true
			if wc.compact == nil {
				wc.copied = s.copies[wi].Load()
			}
			if wc.copied != nil && wi > 0 && wi != s.probeIn {
				// The probes' window reads its stamp with its probes
				// (queueMeta): after them.
				wc.epoch = p.ZMScore(c.ctx, x.Key, EpochMember, BucketMember)
			}
			return
		}
		var probes []core.Entry
		if wi == s.probeIn {
			probes = c.probes()
			c.probeCounted = true
		}
		wc.count = countCmd(c.ctx, p, x, c.ranges(w), c.spans(wi), probes)
		return
	}
	switch {
	case c.placing:
		// Counted by PlaceScript.
	case a.Exact && len(a.Checks) > 0 && len(s.wins) > 1:
		wc.peak = c.peakCmd(p, x.Key, w, a.Lims[wi])
	default:
		for _, g := range a.Checks {
			wc.counts = append(wc.counts, p.ZCount(c.ctx, x.Key, exclusive(g-w), exclusive(g+w)))
		}
	}
	if a.Learn.Slots > 0 {
		wc.tails = c.tail(p, x.Key, a.Lims[wi])
		for l, caps := range a.Learn.LowCaps {
			if len(caps) > 0 {
				wc.lowTails[l] = c.tail(p, x.Key, caps[wi])
			}
		}
	}
	if wi > 0 && wi != s.probeIn {
		// After the counts: a compaction that moved calls before they
		// counted wrote the flag before this reads it.
		wc.flag = p.ZMScore(c.ctx, x.Key, BucketMember)
	}
}

// probes returns the attempt's probes (see core.LossChecks).
func (c *attemptCmds) probes() []core.Entry {
	ps := c.a.Loss.Probes[:]
	for i, e := range ps {
		if e.Member == "" {
			return ps[:i]
		}
	}
	return ps
}

// ranges returns the neighbourhoods (g-w, g+w) of the attempt's checks.
func (c *attemptCmds) ranges(w int64) []countRange {
	r := make([]countRange, len(c.a.Checks))
	for i, g := range c.a.Checks {
		r[i] = countRange{g - w, g + w}
	}
	return r
}

// spans returns the ranks the tails of window wi span, as tail reads
// them: under the limit in force, then under each capped level's cap (in
// level order), when the attempt asks for slots.
func (c *attemptCmds) spans(wi int) []tailSpan {
	a := c.a
	if a.Learn.Slots <= 0 {
		return nil
	}
	span := func(limit int) tailSpan {
		k := min(a.Learn.Slots, limit)
		return tailSpan{oldest: limit + len(a.Adds) - 1, newest: limit - k}
	}
	spans := []tailSpan{span(a.Lims[wi])}
	for _, caps := range a.Learn.LowCaps {
		if len(caps) > 0 {
			spans = append(spans, span(caps[wi]))
		}
	}
	return spans
}

// queueMeta queues the reads that follow every key's: the first key's
// meta members (with the probe when it lives there), the probe in its own
// key otherwise, and the server's clock when the attempt asks for it.
func (c *attemptCmds) queueMeta(p redis.Pipeliner) {
	s, a, ctx := c.s, c.a, c.ctx
	// The checks come after the counts: without MULTI, a loss can fall
	// between two commands of the pipeline, and counts taken after it must
	// not go unnoticed. Counts taken before it were true. ZMSCORE from
	// arguments boxed once: one allocation here instead of one per
	// argument.
	args := make([]any, len(s.metaArgs), len(s.metaArgs)+len(a.Loss.Probes)+1)
	copy(args, s.metaArgs)
	var probes []core.Entry
	if !c.probeCounted {
		probes = c.probes()
	}
	if s.probeIn == 0 {
		for _, e := range probes {
			args = append(args, e.Member)
		}
	}
	if c.win[0].copied != nil {
		c.epochAt = len(args) - 2 // the first window's (see buckets.go)
		args = append(args, EpochMember)
	}
	c.meta = redis.NewFloatSliceCmd(ctx, args...)
	p.Process(ctx, c.meta)
	if pw := &c.win[s.probeIn]; s.probeIn > 0 && !c.probeCounted && (!pw.bucketed || len(probes) > 0 || pw.copied != nil) {
		// The probes' key: its flag, the probes, and its epoch when it
		// counts from a copy, read after the probes (see bucketReply).
		members := []string{BucketMember}
		for _, e := range probes {
			members = append(members, e.Member)
		}
		if pw.copied != nil {
			c.probeEpochAt = len(members)
			members = append(members, EpochMember)
		}
		c.probe = p.ZMScore(ctx, s.wins[s.probeIn].Key, members...)
	}
	if a.Clock {
		c.clock = p.Time(ctx)
	}
	c.queueCopies(p)
}

// queueCopies queues, at the end of the pipeline, the reads that take a
// new copy of the buckets of each compacted window read without
// CountScript that has none (see buckets.go): the epoch, then the hash.
func (c *attemptCmds) queueCopies(p redis.Pipeliner) {
	for wi := range c.win {
		if wc := &c.win[wi]; wc.plain && wc.copied == nil || c.recounting && wc.bucketed {
			x, b := c.s.wins[wi], c.s.width[wi].Load()
			ranges := c.ranges(x.W + c.a.Margin.Widen)
			if len(ranges) == 0 {
				// A round trip that only probes: the copy starts where
				// the probe's window would.
				for _, e := range c.probes() {
					ranges = append(ranges, countRange{e.Score - x.W, e.Score + x.W})
				}
			}
			from := copyFrom(ranges, b)
			wc.take = copyCmds{epoch: p.ZMScore(c.ctx, x.Key, EpochMember, BucketMember),
				fields: p.HMGet(c.ctx, CompactKey(x.Key), copyFields(b, from)...), b: b, from: from}
		}
	}
}

// tail queues the read of the members the next free slots under limit
// (the limit in force, or a priority's cap) depend on: ranks limit-k to
// limit-1+len(adds) from the top (see nextSlots in internal/core).
func (c *attemptCmds) tail(p redis.Pipeliner, key string, limit int) *redis.ZSliceCmd {
	a := c.a
	k := min(a.Learn.Slots, limit)
	return p.ZRangeWithScores(c.ctx, key, int64(-(limit + len(a.Adds))), int64(-(limit - k + 1)))
}

// reply reads the commands' results.
func (c *attemptCmds) reply() (core.Reply, error) {
	for wi, wc := range c.win {
		if wc.compact != nil {
			if v, err := wc.compact.Int64Slice(); err == nil && len(v) == 2 && v[1] == 1 {
				c.s.behind[wi].Store(true)
			}
		}
	}
	r := c.metaReply()
	if c.clock != nil {
		r.ServerTime = c.clock.Val()
	}
	c.leaseReply(&r)
	if c.a.Learn.Slots > 0 {
		r.Tails = make([][]core.Entry, len(c.s.wins))
		for l, caps := range c.a.Learn.LowCaps {
			if len(caps) > 0 {
				r.LowTails[l] = make([][]core.Entry, len(c.s.wins))
			}
		}
	}
	for wi := range c.win {
		if err := c.winReply(&r, wi); err != nil {
			return core.Reply{}, err
		}
	}
	if c.placing {
		if err := c.placeReply(&r); err != nil {
			return core.Reply{}, err
		}
	}
	return r, nil
}

// metaReply returns a reply with the meta members and the probe read, and
// a count per window to be filled in.
func (c *attemptCmds) metaReply() core.Reply {
	s := c.s
	// ZMSCORE answers nil for a missing member, which go-redis reads as 0:
	// no member of ours, nor the marker, ever scores exactly 0.
	found := c.meta.Val()
	score := func(i int) float64 {
		if i < len(found) {
			return found[i]
		}
		return 0
	}
	r := core.Reply{
		Counts:   make([][]int64, len(s.wins)),
		NoMark:   MetaValue(score(0)) == 0,
		Pause:    MetaValue(score(1)),
		Limit:    MetaValue(score(2)),
		LimitEnd: MetaValue(score(3)),
		Wide:     MetaValue(score(4)),
		WideEnd:  MetaValue(score(5)),
	}
	if c.probeCounted {
		return r // read by CountScript
	}
	// A probe, a call of ours (see metaArgs), scores its time.
	for i := range c.probes() {
		switch {
		case s.probeIn == 0:
			r.Gone[i] = score(7+i) == 0
		case c.probe != nil:
			v := c.probe.Val()
			r.Gone[i] = len(v) < 2+i || v[1+i] == 0
		}
	}
	return r
}

// winReply reads into r window wi's counts, peaks and tails.
func (c *attemptCmds) winReply(r *core.Reply, wi int) error {
	a, wc := c.a, &c.win[wi]
	if wc.count != nil {
		probes := 0
		if c.probeCounted && wi == c.s.probeIn {
			probes = len(c.probes())
		}
		read, err := readCount(wc.count, len(a.Checks), probes, len(c.spans(wi)))
		if err != nil {
			return err
		}
		r.Counts[wi] = read.counts
		if c.probeCounted && wi == c.s.probeIn {
			for i, found := range read.probed {
				r.Gone[i] = !found
			}
		}
		if a.Learn.Slots > 0 {
			r.Tails[wi] = read.tails[0]
			rest := read.tails[1:]
			for l, caps := range a.Learn.LowCaps {
				if len(caps) > 0 {
					r.LowTails[l][wi] = rest[0]
					rest = rest[1:]
				}
			}
		}
		if a.Exact && len(a.Checks) > 0 && len(c.s.wins) > 1 {
			c.noPeaks(r, wi)
		}
		return nil
	}
	if wc.plain {
		c.bucketReply(r, wi)
		return nil
	}
	if wc.peak != nil {
		counts, peaks, err := readPeaks(wc.peak, len(a.Checks))
		if err != nil {
			return err
		}
		r.Counts[wi] = counts
		if r.Peaks == nil {
			r.Peaks = make([][]int64, len(c.s.wins))
		}
		r.Peaks[wi] = peaks
	} else {
		r.Counts[wi] = make([]int64, len(wc.counts))
		for i, cmd := range wc.counts {
			r.Counts[wi][i] = cmd.Val()
		}
	}
	if wc.tails != nil {
		r.Tails[wi] = zEntries(wc.tails.Val())
		for l, tail := range wc.lowTails {
			if tail != nil {
				r.LowTails[l][wi] = zEntries(tail.Val())
			}
		}
	}
	return nil
}

// bucketReply reads into r window wi's counts, read without CountScript
// (see buckets.go): its members' and its buckets', from its copy. A
// window whose copy went stale (another epoch), or could not be taken,
// and a probe found neither in the set nor in the copy's buckets, when the
// copy cannot tell (see bucketCopy.mayHold), go to c.again, to be read
// with CountScript.
func (c *attemptCmds) bucketReply(r *core.Reply, wi int) {
	a, wc := c.a, &c.win[wi]
	r.Counts[wi] = make([]int64, len(wc.counts))
	for i, cmd := range wc.counts {
		r.Counts[wi][i] = cmd.Val()
	}
	if a.Exact && len(a.Checks) > 0 && len(c.s.wins) > 1 {
		c.noPeaks(r, wi)
	}
	cp := wc.copied
	switch {
	case cp == nil:
		if cp = wc.take.taken(&c.s.width[wi]); cp == nil {
			c.again = append(c.again, wi)
			return
		}
		c.s.copies[wi].Store(cp)
	case c.stampRead(wi) != cp.stamp:
		c.s.copies[wi].CompareAndSwap(cp, nil)
		c.again = append(c.again, wi)
		return
	}
	for i, rg := range c.ranges(c.s.wins[wi].W + a.Margin.Widen) {
		n, ok := cp.count(rg.x, rg.y)
		if !ok {
			// Beyond what the copy holds: the recount takes another.
			c.s.copies[wi].CompareAndSwap(cp, nil)
			c.again = append(c.again, wi)
			return
		}
		r.Counts[wi][i] += n
	}
	if wi == c.s.probeIn {
		for i, e := range c.probes() {
			if !r.Gone[i] {
				continue
			}
			switch held, ok := cp.mayHold(e.Score); {
			case !ok:
				c.again = append(c.again, wi)
			case held:
				r.Gone[i] = false // compacted
			}
		}
	}
}

// stampRead is the epoch and the flag of compacted window wi this round
// trip read after its counts and its probes (0: missing).
func (c *attemptCmds) stampRead(wi int) [2]float64 {
	at := func(v []float64, i int) float64 {
		if i < len(v) {
			return v[i]
		}
		return 0
	}
	switch {
	case wi == 0:
		v := c.meta.Val()
		return [2]float64{at(v, c.epochAt), at(v, 6)}
	case wi == c.s.probeIn && c.probeEpochAt > 0:
		v := c.probe.Val()
		return [2]float64{at(v, c.probeEpochAt), at(v, 0)}
	}
	v := c.win[wi].epoch.Val()
	return [2]float64{at(v, 0), at(v, 1)}
}

// noPeaks sets window wi's peaks to -1 (the count decides): a compacted
// window reads none.
func (c *attemptCmds) noPeaks(r *core.Reply, wi int) {
	if r.Peaks == nil {
		r.Peaks = make([][]int64, len(c.s.wins))
	}
	r.Peaks[wi] = make([]int64, len(c.a.Checks))
	for i := range r.Peaks[wi] {
		r.Peaks[wi][i] = -1
	}
}

// flagged returns the windows read as a log whose flag was set: another
// process compacts them, and their counts missed its buckets.
func (c *attemptCmds) flagged() []int {
	var out []int
	set := func(v []float64, i int) bool { return i < len(v) && MetaValue(v[i]) > 0 }
	for wi := range c.win {
		wc := &c.win[wi]
		if wc.bucketed {
			continue // read with its buckets
		}
		var seen bool
		switch {
		case wi == 0:
			seen = set(c.meta.Val(), 6)
		case wc.flag != nil:
			seen = set(wc.flag.Val(), 0)
		case wi == c.s.probeIn && c.probe != nil:
			seen = set(c.probe.Val(), 0)
		}
		if seen {
			out = append(out, wi)
		}
	}
	return out
}

// Remove takes members out of every limit's key, in one round trip. at,
// when positive, is the score all of them were admitted at, and says that
// they were written for sure: in a compacted window, one a compaction
// already moved then leaves its bucket too (see GiveBackScript). At 0,
// such a one keeps counting until its bucket leaves the window.
func (s *Store) Remove(ctx context.Context, members []string, at int64) error {
	args := toAny(members)
	var calls []core.Entry
	if at > 0 {
		calls = make([]core.Entry, len(members))
		for i, m := range members {
			calls[i] = core.Entry{Score: at, Member: m}
		}
	}
	return s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.pipelined(calls != nil)(ctx, func(p redis.Pipeliner) error {
			for wi, x := range s.wins {
				if calls != nil {
					s.queueGiveBack(ctx, p, wi, calls)
				} else {
					p.ZRem(ctx, x.Key, args...)
				}
			}
			return nil
		})
		return err
	})
}

// pipelined returns the client's TxPipelined when once is set, else its
// Pipelined. go-redis sends a plain pipeline again when its reply is lost
// after it was written, and a transaction only when it could not be
// written: a pipeline that gives back calls written for sure is sent as a
// transaction (once), for GiveBackScript must not run twice (a call's
// count would leave its bucket twice). A caller that sends it again after
// an error gives those calls back plainly (see core.Attempt.Resent).
func (s *Store) pipelined(once bool) func(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	if once {
		return s.rdb.TxPipelined
	}
	return s.rdb.Pipelined
}

// queueGiveBack queues the removal of calls, written for sure, from the
// key of window wi: with GiveBackScript when the window is compacted (or
// another process compacts it), so that one already moved leaves its
// bucket; with ZREM otherwise.
func (s *Store) queueGiveBack(ctx context.Context, p redis.Pipeliner, wi int, calls []core.Entry) {
	if s.compacted[wi].Load() {
		giveBackCmd(ctx, p, s.wins[wi], calls)
	} else {
		p.ZRem(ctx, s.wins[wi].Key, entryMembers(calls)...)
	}
}

// Add puts members into every limit's key at their scores, counted as
// calls, in one pipeline.
func (s *Store) Add(ctx context.Context, members []core.Entry) error {
	zs := make([]redis.Z, len(members))
	for i, e := range members {
		zs[i] = redis.Z{Score: float64(e.Score), Member: e.Member}
	}
	return s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, x := range s.wins {
				p.ZAdd(ctx, x.Key, zs...)
			}
			return nil
		})
		return err
	})
}

// Now reads the server's clock (TIME).
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var server time.Time
	err := s.bounded(ctx, func(ctx context.Context) (err error) {
		server, err = s.rdb.Time(ctx).Result()
		return err
	})
	if err != nil {
		// A call that overran may still write server: never read it then.
		return time.Time{}, err
	}
	return server, nil
}

// WriteMeta writes m, a change to the members that are not calls, to the
// first limit's key in one pipeline: a pause (only ever later), a lowered
// limit and its end, or its removal, a back-off and its end; it keeps the
// key alive at least ttl (never shortening a longer TTL), and publishes
// m.News, when set, after the write.
func (s *Store) WriteMeta(ctx context.Context, m core.MetaWrite, ttl time.Duration) error {
	key := s.wins[0].Key
	var set []redis.Z
	meta := func(member string, v int64) { set = append(set, redis.Z{Score: float64(MetaScore(v)), Member: member}) }
	if m.Limit > 0 {
		meta(LimitMember, m.Limit)
		meta(LimitEndMember, m.LimitEnd)
	}
	if m.Backoff > 0 {
		meta(BackoffMember, m.Backoff)
		meta(BackoffEndMember, m.BackoffEnd)
	}
	return s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if m.Pause > 0 {
				// Negative scores: the lower one is the later pause.
				p.ZAddLT(ctx, key, redis.Z{Score: float64(MetaScore(m.Pause)), Member: PauseMember})
			}
			if len(set) > 0 {
				p.ZAdd(ctx, key, set...)
			}
			if m.ClearLimit {
				p.ZRem(ctx, key, LimitMember, LimitEndMember)
			}
			// Never shorten the TTL another writer set for a longer pause.
			secs := ttl.Round(time.Second) + time.Second
			p.ExpireNX(ctx, key, secs)
			p.ExpireGT(ctx, key, secs)
			if m.News != nil {
				// After the write: a listener that reads the members on
				// hearing it finds them.
				p.Publish(ctx, NewsChannel(key), m.News.String())
			}
			return nil
		})
		return err
	})
}

// Usage reads every limit's window without changing it, in two MULTI
// round trips bounded together by ctx: the server's clock, the pause,
// limit and limit-end members and every key's flag (BucketMember) first,
// from which limits gives the limits in force; then, per key, the members
// counting now, those among them that are debt, those scored after now (up
// to core.FutureBound past it), and the member whose leaving frees the next
// slot under the limit in force. A compacted window counts its buckets
// too (CountScript), and its next slot may be a bucket's end; its debt
// counts only the calls not compacted yet.
func (s *Store) Usage(ctx context.Context, limits func(now int64, m core.Meta) []int) (core.UsageRead, error) {
	var (
		u     core.UsageRead
		clock *redis.TimeCmd
		meta  *redis.FloatSliceCmd
		flags = make([]*redis.FloatSliceCmd, len(s.wins))
		used  = make([]*redis.IntCmd, len(s.wins))
		debt  = make([]*redis.StringSliceCmd, len(s.wins))
		resv  = make([]*redis.IntCmd, len(s.wins))
		nth   = make([]*redis.ZSliceCmd, len(s.wins))
		count = make([]*redis.Cmd, len(s.wins))
	)
	err := s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			clock = p.Time(ctx)
			meta = p.ZMScore(ctx, s.wins[0].Key, PauseMember, LimitMember, LimitEndMember)
			for i, x := range s.wins {
				flags[i] = p.ZMScore(ctx, x.Key, BucketMember)
			}
			return nil
		})
		if err != nil {
			return err
		}
		now := clock.Val().UnixMicro()
		u.Meta = decodeMeta(meta.Val())
		u.Lims = limits(now, u.Meta)
		// A second round trip, now that the server's clock and the limit in
		// force are known: what it counts is consistent within each key.
		_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for i, x := range s.wins {
				if v := flags[i].Val(); len(v) == 1 && MetaValue(v[0]) > 0 {
					s.compacted[i].Store(true)
				}
				debt[i] = p.ZRangeByScore(ctx, x.Key, &redis.ZRangeBy{Min: exclusive(now - x.W), Max: itoa(now)})
				if s.compacted[i].Load() {
					ranges := []countRange{{now - x.W, now + 1}, {now, now + core.FutureBound + 1}}
					count[i] = countCmd(ctx, p, x, ranges, []tailSpan{{u.Lims[i] - 1, u.Lims[i] - 1}}, nil)
					continue
				}
				used[i] = p.ZCount(ctx, x.Key, exclusive(now-x.W), itoa(now))
				resv[i] = p.ZCount(ctx, x.Key, exclusive(now), itoa(now+core.FutureBound))
				nth[i] = p.ZRangeWithScores(ctx, x.Key, int64(-u.Lims[i]), int64(-u.Lims[i]))
			}
			return nil
		})
		return err
	})
	if err != nil {
		return core.UsageRead{}, err
	}
	u.Server = clock.Val()
	for i := range s.wins {
		d := 0
		for _, m := range debt[i].Val() {
			if strings.HasPrefix(m, core.DebtPrefix) {
				d++
			}
		}
		u.Debt = append(u.Debt, d)
		if count[i] != nil {
			read, err := readCount(count[i], 2, 0, 1)
			if err != nil {
				return core.UsageRead{}, err
			}
			u.Used = append(u.Used, int(read.counts[0]))
			u.Reserved = append(u.Reserved, int(read.counts[1]))
			u.Nth = append(u.Nth, read.tails[0])
			continue
		}
		u.Used = append(u.Used, int(used[i].Val()))
		u.Reserved = append(u.Reserved, int(resv[i].Val()))
		u.Nth = append(u.Nth, zEntries(nth[i].Val()))
	}
	return u, nil
}

// Name names this Throttler in the news it publishes: its members'
// prefix, in hex.
func (s *Store) Name() string { return hex.EncodeToString([]byte(s.self)) }

// errTimeout reports a Redis call that did not answer in time.
var errTimeout = errors.New("no answer within the Redis timeout")

// bounded runs a Redis call and returns by ctx's deadline even when the
// client would not (see store). When the client itself ends the call in
// time (see inline), the call runs in the caller's goroutine. Otherwise it
// runs in a helper goroutine and bounded returns at the deadline exactly: a
// call that overruns is left to finish in the background (the client's own
// timeouts end it), its results never read.
func (s *Store) bounded(ctx context.Context, call func(context.Context) error) error {
	if s.inline(ctx) {
		return call(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errTimeout, context.Cause(ctx))
	}
}

// inlineSlack is how much later than ctx's deadline a client's socket
// timeouts may end a call that inline still lets run in the caller's
// goroutine: the time between the caller setting its deadline and the call
// starting, which is microseconds unless the process stalls.
const inlineSlack = 2 * time.Millisecond

// inline reports whether the client ends a call made with ctx by ctx's
// deadline by itself, within the slack below, so that the call may run in
// the caller's goroutine.
//
// A client that honours context deadlines applies ctx's to every socket
// read and write, and to waiting for a connection and dialing. A
// *redis.Client without ContextTimeoutEnabled ends those waits, and the
// backoff before a retry, at ctx's deadline too, but each socket write and
// read at its own WriteTimeout and ReadTimeout instead: inline takes it when
// both are set and no longer than the time ctx has left, give or take
// inlineSlack. The call then ends by the later of its deadline and Redis's
// last answer to it, plus at most one socket write and one socket read,
// each within those timeouts: after that time go-redis starts no new wait,
// dial or retry, and only a write and then a read can still be under way on
// a connection it holds. A Redis that hung before the call began fails it
// about one read timeout after the call began (at its deadline when that timeout
// is the time it had), or, where go-redis retried a timed-out read, up to
// one read timeout past the deadline.
func (s *Store) inline(ctx context.Context) bool {
	if s.ctxTimeouts {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && s.ioTimeout > 0 && s.ioTimeout <= time.Until(deadline)+inlineSlack
}

// HonoursContext reports whether the client ends a call at its context's
// deadline by itself.
func HonoursContext(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// SocketTimeout returns the longer of c's socket read and write timeouts
// when c is a *redis.Client that sets both, and 0 otherwise. Only a
// *redis.Client (a failover client is one), the client whose way to a
// socket inline describes: a cluster client follows redirects and reloads
// its slot map, and a ring spreads a pipeline over its shards, with calls
// of their own; without ContextTimeoutEnabled, they keep the helper
// goroutine.
func SocketTimeout(c redis.UniversalClient) time.Duration {
	rc, ok := c.(*redis.Client)
	if !ok {
		return 0
	}
	// Options holds the values in force: 0 means no deadline, and -1 that
	// go-redis sets none.
	o := rc.Options()
	if o.ReadTimeout <= 0 || o.WriteTimeout <= 0 {
		return 0
	}
	return max(o.ReadTimeout, o.WriteTimeout)
}

// toAny converts members to the arguments go-redis takes.
func toAny(members []string) []any {
	args := make([]any, len(members))
	for i, m := range members {
		args[i] = m
	}
	return args
}

// entryMembers returns the members of es as ZREM's arguments.
func entryMembers(es []core.Entry) []any {
	args := make([]any, len(es))
	for i, e := range es {
		args[i] = e.Member
	}
	return args
}

// zEntries converts a ZRANGE WITHSCORES reply to entries.
func zEntries(zs []redis.Z) []core.Entry {
	out := make([]core.Entry, len(zs))
	for i, z := range zs {
		m, _ := z.Member.(string)
		out[i] = core.Entry{Score: int64(z.Score), Member: m}
	}
	return out
}

// ReadMeta reads the pause and the lowered limit, as a round trip does.
func (s *Store) ReadMeta(ctx context.Context) (core.Reply, error) {
	var v []float64
	err := s.bounded(ctx, func(ctx context.Context) (err error) {
		v, err = s.rdb.ZMScore(ctx, s.wins[0].Key, PauseMember, LimitMember, LimitEndMember).Result()
		return err
	})
	if err != nil {
		return core.Reply{}, err
	}
	if len(v) != 3 {
		return core.Reply{}, errors.New("throttler: short ZMSCORE reply")
	}
	return core.Reply{Pause: MetaValue(v[0]), Limit: MetaValue(v[1]), LimitEnd: MetaValue(v[2])}, nil
}

// WatchNews subscribes to the news published on channel (see news.go).
func (s *Store) WatchNews(channel string) *Subscription {
	return s.subscribe(channel, func(string) bool { return true })
}

// WideScript publishes a margin: ARGV[1] µs, in force for ARGV[2] µs from
// the server's now, unless a larger one is in force, which it extends. The
// members only grow while in force; one that has ended is replaced. A
// script, so that a margin that ended and a new, smaller one cannot cross
// a larger one published at the same moment. Scores are formatted whole:
// Lua's own conversion keeps 14 digits, and a server time has 16.
var WideScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = redis.call('ZMSCORE', KEYS[1], ARGV[3], ARGV[4])
local x, e = tonumber(ARGV[1]), now + tonumber(ARGV[2])
if s[2] and -tonumber(s[2]) > now then
  x = math.max(x, -tonumber(s[1] or 0))
  e = math.max(e, -tonumber(s[2]))
end
redis.call('ZADD', KEYS[1], string.format('%.0f', -x), ARGV[3], string.format('%.0f', -e), ARGV[4])
return 1
`)

// Closed reports whether err says the client was closed: it will never
// answer again.
func Closed(err error) bool { return errors.Is(err, redis.ErrClosed) }
