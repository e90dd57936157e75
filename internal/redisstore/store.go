package redisstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
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
	keys     []keyState     // per window: how its key is read (see keyForm)
	metaArgs []any          // ZMSCORE key marker pause limit limit-end wide wide-end bucketed tally, boxed once
	probeIn  int            // the index of the key the probe is looked up in
	lease    *core.InFlight // WithInFlight's, or nil
	self     string         // this Throttler's name in the line for places in flight
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
	// Poll is how long a subscription's goroutine waits for a message
	// before it looks whether it should stop (0: subscriptionPoll). Set it
	// before anything subscribes. The simulator lengthens it: its runs
	// span virtual hours, and each poll costs real time there.
	Poll time.Duration
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
		metaArgs:    []any{"zmscore", wins[0].Key, Marker, PauseMember, LimitMember, LimitEndMember, WideMember, WideEndMember, BucketMember, TallyMember},
		keys:        make([]keyState, len(wins)),
		ctxTimeouts: HonoursContext(c),
		ioTimeout:   SocketTimeout(c),
	}
	for i, x := range wins {
		s.keys[i].compacted.Store(x.Bucket > 0)
		s.keys[i].buckets.width.Store(x.Bucket)
	}
	return s
}

// Reserve applies one attempt in one round trip and returns what it read
// (the commands it sends are listed in doc.go). An error means the attempt
// may or may not have been applied. A reply that shows the flag of a key
// read as a log (another process compacts it) costs a second round trip,
// which reads that key again with CountScript (see recount); so does a
// compacted key read without it whose copy of its buckets went stale, or a
// probe missing from its set but not before its cut (see countFromCopy).
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
	for _, wi := range cmds.buckets.again {
		if !slices.Contains(late, wi) {
			late = append(late, wi)
		}
	}
	if len(late) > 0 {
		// The recount only reads: tried again alone, not with the
		// attempt's writes, after a broken connection.
		for try := 0; ; try++ {
			err = s.recount(ctx, a, late, &r)
			if err == nil || try == 2 || !Transient(err) || ctx.Err() != nil {
				break
			}
		}
		if err != nil && cmds.placing && Transient(err) {
			// The claims were placed, and a rewritten to their scores (see
			// placeReply): sent again, to keys now read compacted (which
			// the store does not place on), a would add the claims it did
			// not place where no count looks, and admit them unchecked.
			// The round fails instead, and what it wrote goes back as a
			// failed round's does.
			err = fmt.Errorf("%w: reading the counts again after the claims were placed: %w", errPlacedNotResent, err)
		}
	}
	return r, err
}

// errPlacedNotResent marks a round trip's error that must not be sent
// again (see Reserve): not Transient, whatever else it wraps.
var errPlacedNotResent = errors.New("throttler: a round trip whose claims the store placed failed after it")

// attemptCmds are the commands of one attempt's round trip, queued on a
// pipeline (see doc.go for the sequence), and read back into a reply.
type attemptCmds struct {
	s       *Store
	a       *core.Attempt
	ctx     context.Context // the round trip's
	win     []winCmds       // per window
	buckets bucketRound     // what the compacted windows' reads share
	clock   *redis.TimeCmd
	meta    *redis.FloatSliceCmd
	probe   *redis.FloatSliceCmd // ZMSCORE <probe key> bucketed [probe], when not in meta
	tally   *redis.FloatCmd      // ZINCRBY of the first key's tally, when the round trip adds to it
	leases  *redis.Cmd           // the lease script's, when places were asked for
	placing bool                 // the claims go to PlaceScript (see place.go)
	place   *redis.Cmd           // its answer
	tenants tenantCmds           // the tenants' calls read (see tenants.go)
}

// winCmds are one window's reads in an attempt's round trip, by the form
// its key is read in for the whole round trip: its counts (ZCOUNT per
// check, or the peak script), its tails, its flag, and a compacted
// window's own reads.
type winCmds struct {
	form   keyForm
	counts []*redis.IntCmd
	peak   *redis.Cmd
	tails  *redis.ZSliceCmd
	// By level: the tail for the attempt's Learn.LowCaps.
	lowTails [core.Levels]*redis.ZSliceCmd
	flag     *redis.FloatSliceCmd // ZMSCORE key bucketed (windows after the first, read as a log, not the probe's)
	bk       *bucketCmds          // a compacted window's (see compacted.go)
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
	c.queueMargin(p)
	var remove []any
	if len(a.Remove) > 0 {
		remove = toAny(a.Remove)
	}
	for wi := range s.wins {
		c.win[wi].form = s.form(wi) // for the whole round trip
	}
	// Every key's writes and reads in turn; with PlaceScript, every key's
	// writes, then the claims placed and counted in every key at once,
	// then the reads (see place.go).
	c.placing = c.placeable()
	for wi := range s.wins {
		c.queueWrites(p, wi, zs, remove)
		if !c.placing {
			c.queueReads(p, wi)
		}
	}
	if c.placing {
		c.place = c.queuePlace(p)
		for wi := range s.wins {
			c.queueReads(p, wi)
		}
	}
	c.queueTaken(p)
	c.queueTenants(p)
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
	return c.withMarker(zs)
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
	form := c.win[wi].form
	if len(a.GiveBack) > 0 {
		form.giveBack(ctx, p, x, a.GiveBack)
	}
	form.beforeAdds(c, p, wi)
	if a.Trim.On {
		TrimScript.Eval(ctx, p, []string{x.Key}, x.W+core.TrimSlack, core.FutureBound)
	}
	if wi == 0 {
		c.queueHealPause(p)
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
		form.added(x, len(add))
		if wi == 0 {
			c.queueTally(p)
		}
	}
}

// queueReads queues the reads of window wi's key, after its writes (see
// keyForm.queueReads), and its PEXPIRE.
func (c *attemptCmds) queueReads(p redis.Pipeliner, wi int) {
	c.win[wi].form.queueReads(c, p, wi)
	if a, x := c.a, c.s.wins[wi]; a.Expire.On {
		if wi > 0 {
			p.ZAdd(c.ctx, x.Key, redis.Z{Score: float64(MetaScore(1)), Member: KeeperMember})
		}
		p.PExpire(c.ctx, x.Key, a.Expire.TTLs[wi])
	}
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
	args := make([]any, len(s.metaArgs), len(s.metaArgs)+3) // the probes and a stamp
	copy(args, s.metaArgs)
	var probes []core.Entry
	if !c.buckets.probeCounted {
		probes = c.probes()
	}
	if s.probeIn == 0 {
		for _, e := range probes {
			args = append(args, e.Member)
		}
	}
	if c.win[0].copied() != nil {
		c.buckets.stampAt = len(args) - 2 // the first window's (see buckets.go)
		args = append(args, StampMember)
	}
	c.meta = redis.NewFloatSliceCmd(ctx, args...)
	p.Process(ctx, c.meta)
	if pw := &c.win[s.probeIn]; s.probeIn > 0 && !c.buckets.probeCounted && (pw.bk == nil || len(probes) > 0 || pw.copied() != nil) {
		// The probes' key: its flag, the probes, and its stamp when it
		// counts from a copy, read after the probes (see countFromCopy).
		members := []string{BucketMember}
		for _, e := range probes {
			members = append(members, e.Member)
		}
		if pw.copied() != nil {
			c.buckets.probeStampAt = len(members)
			members = append(members, StampMember)
		}
		c.probe = p.ZMScore(ctx, s.wins[s.probeIn].Key, members...)
	}
	if a.Clock {
		c.clock = p.Time(ctx)
	}
	for wi := range c.win {
		c.win[wi].form.queueLast(c, p, wi)
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
		if err := c.win[wi].form.read(c, &r, wi); err != nil {
			return core.Reply{}, err
		}
	}
	if c.placing {
		if err := c.placeReply(&r); err != nil {
			return core.Reply{}, err
		}
	}
	if err := c.readTenants(&r); err != nil {
		return core.Reply{}, err
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
		Counts: make([][]int64, len(s.wins)),
		Meta:   core.Meta{Pause: MetaValue(score(1)), Limit: MetaValue(score(2)), LimitEnd: MetaValue(score(3))},
	}
	readMargin(&r, score(4), score(5))
	c.readProbes(&r, score)
	return r
}

// flagged returns the windows read as a log whose flag was set: another
// process compacts them, and their counts missed its buckets.
func (c *attemptCmds) flagged() []int {
	var out []int
	set := func(v []float64, i int) bool { return i < len(v) && MetaValue(v[i]) > 0 }
	for wi := range c.win {
		wc := &c.win[wi]
		if wc.bk != nil {
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
					s.form(wi).giveBack(ctx, p, x, calls)
				} else {
					p.ZRem(ctx, x.Key, args...)
				}
			}
			return nil
		})
		return err
	})
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

// Name names this Throttler in the news it publishes: its members'
// prefix, in hex.
func (s *Store) Name() string { return hex.EncodeToString([]byte(s.self)) }

// WatchNews subscribes to the news published on channel (see news.go).
func (s *Store) WatchNews(channel string) *Subscription {
	return s.subscribe(channel, func(string) bool { return true })
}
