package throttler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStore is the store on a go-redis client: every limit's sorted set,
// the first of which also holds the members that are not calls.
type redisStore struct {
	rdb      redis.UniversalClient
	wins     []window
	metaArgs []any           // ZMSCORE key marker pause limit limit-end wide wide-end, boxed once
	probeIn  int             // the index of the key the probe is looked up in
	lease    *inflightOption // WithInFlight's, or nil
	self     string          // this Throttler's name in the line for places in flight
	// The client ends a call at its context's deadline by itself (see
	// inline).
	ctxTimeouts bool
	// The longer of the client's socket read and write timeouts when it is
	// a *redis.Client that sets both, else 0 (see socketTimeout): a call
	// with at least that long left before its deadline runs in the
	// caller's goroutine (see inline).
	ioTimeout time.Duration
}

func newRedisStore(c redis.UniversalClient, wins []window, probeIn int, lease *inflightOption, self string) *redisStore {
	return &redisStore{
		self:        self,
		rdb:         c,
		wins:        wins,
		probeIn:     probeIn,
		lease:       lease,
		metaArgs:    []any{"zmscore", wins[0].key, marker, pauseMember, limitMember, limitEndMember, wideMember, wideEndMember},
		ctxTimeouts: honoursContext(c),
		ioTimeout:   socketTimeout(c),
	}
}

func (s *redisStore) reserve(ctx context.Context, a *attempt) (reply, error) {
	cmds := &attemptCmds{s: s, a: a}
	err := s.bounded(ctx, func(ctx context.Context) error {
		var err error
		cmds.ctx = ctx
		if a.exact {
			_, err = s.rdb.TxPipelined(ctx, cmds.queue)
		} else {
			_, err = s.rdb.Pipelined(ctx, cmds.queue)
		}
		return err
	})
	if err != nil {
		return reply{}, err
	}
	return cmds.reply(), nil
}

// attemptCmds are the commands of one attempt's round trip, queued on a
// pipeline (see attempt for the sequence), and read back into a reply.
type attemptCmds struct {
	s      *redisStore
	a      *attempt
	ctx    context.Context // the round trip's
	counts []*redis.IntCmd // window by window
	tails  []*redis.ZSliceCmd
	// By level: the tails for the attempt's lowCaps.
	lowTails [levels][]*redis.ZSliceCmd
	clock    *redis.TimeCmd
	meta     *redis.FloatSliceCmd
	probe    *redis.FloatSliceCmd // when not in meta
	leases   *redis.Cmd           // the lease script's, when places were asked for
}

func (c *attemptCmds) queue(p redis.Pipeliner) error {
	s, a, ctx := c.s, c.a, c.ctx
	c.counts = make([]*redis.IntCmd, 0, len(s.wins)*len(a.checks))
	zs := make([]redis.Z, len(a.adds), len(a.adds)+1)
	for i, e := range a.adds {
		zs[i] = redis.Z{Score: float64(e.score), Member: e.member}
	}
	if a.mark {
		zs = append(zs, redis.Z{Score: float64(metaScore(1)), Member: marker})
	}
	c.queueLeases(p)
	if a.margin > 0 && len(a.adds) > 0 {
		// Before any member is added: a round that counts after them
		// reads the margin it must count with (see margin.go).
		wideScript.Eval(ctx, p, []string{s.wins[0].key}, a.margin, a.wideFor, wideMember, wideEndMember)
	}
	var remove []any
	if len(a.remove) > 0 {
		remove = toAny(a.remove)
	}
	for wi, x := range s.wins {
		if remove != nil {
			p.ZRem(ctx, x.key, remove...)
		}
		if a.trim && a.trimAt > 0 {
			p.ZRemRangeByScore(ctx, x.key, trimFloor, exclusive(a.trimAt-x.w-trimSlack))
			p.ZRemRangeByScore(ctx, x.key, exclusive(a.futureAt), "+inf")
		}
		if wi == 0 && a.pause > 0 {
			// Before the marker: a marker present means the pause written
			// with it is there too. Every replica listening hears of it.
			p.ZAddLT(ctx, x.key, redis.Z{Score: float64(metaScore(a.pause)), Member: pauseMember})
			p.Publish(ctx, newsChannel(x.key), news{pause: a.pause}.String())
		}
		add := zs
		if wi > 0 {
			add = zs[:len(a.adds)] // the marker lives in the first key only
		}
		if len(add) > 0 {
			p.ZAdd(ctx, x.key, add...)
		}
		for _, g := range a.checks {
			w := x.w + a.widen
			c.counts = append(c.counts, p.ZCount(ctx, x.key, exclusive(g-w), exclusive(g+w)))
		}
		if a.slots > 0 {
			c.tails = append(c.tails, c.tail(p, x.key, a.lims[wi]))
			for l, caps := range a.lowCaps {
				if len(caps) > 0 {
					c.lowTails[l] = append(c.lowTails[l], c.tail(p, x.key, caps[wi]))
				}
			}
		}
		if a.expire {
			p.PExpire(ctx, x.key, a.ttls[wi])
		}
	}
	// The checks come after the counts: without MULTI, a loss can fall
	// between two commands of the pipeline, and counts taken after it must
	// not go unnoticed. Counts taken before it were true. ZMSCORE from
	// arguments boxed once: one allocation here instead of one per
	// argument.
	args := make([]any, len(s.metaArgs), len(s.metaArgs)+1)
	copy(args, s.metaArgs)
	if a.probe != "" && s.probeIn == 0 {
		args = append(args, a.probe)
	}
	c.meta = redis.NewFloatSliceCmd(ctx, args...)
	p.Process(ctx, c.meta)
	if a.probe != "" && s.probeIn > 0 {
		c.probe = p.ZMScore(ctx, s.wins[s.probeIn].key, a.probe)
	}
	if a.clock {
		c.clock = p.Time(ctx)
	}
	return nil
}

// tail queues the read of the members the next free slots under limit
// (the limit in force, or a priority's cap) depend on: ranks limit-k to
// limit-1+len(adds) from the top (see nextSlots).
func (c *attemptCmds) tail(p redis.Pipeliner, key string, limit int) *redis.ZSliceCmd {
	a := c.a
	k := min(a.slots, limit)
	return p.ZRangeWithScores(c.ctx, key, int64(-(limit + len(a.adds))), int64(-(limit - k + 1)))
}

// reply reads the commands' results.
func (c *attemptCmds) reply() reply {
	s, a := c.s, c.a
	// ZMSCORE answers nil for a missing member, which go-redis reads as 0:
	// no member of ours, nor the marker, ever scores exactly 0.
	found := c.meta.Val()
	score := func(i int) float64 {
		if i < len(found) {
			return found[i]
		}
		return 0
	}
	r := reply{
		counts:   make([][]int64, len(s.wins)),
		noMark:   metaValue(score(0)) == 0,
		pause:    metaValue(score(1)),
		limit:    metaValue(score(2)),
		limitEnd: metaValue(score(3)),
		wide:     metaValue(score(4)),
		wideEnd:  metaValue(score(5)),
		// The probe, a call of ours (see metaArgs), scores its time.
		lost: a.probe != "" && s.probeIn == 0 && score(6) == 0,
	}
	if c.probe != nil {
		r.lost = len(c.probe.Val()) == 0 || c.probe.Val()[0] == 0
	}
	if c.clock != nil {
		r.serverTime = c.clock.Val()
	}
	c.leaseReply(&r)
	flat := make([]int64, len(c.counts))
	for i, cmd := range c.counts {
		flat[i] = cmd.Val()
	}
	for wi := range s.wins {
		r.counts[wi] = flat[wi*len(a.checks) : (wi+1)*len(a.checks)]
	}
	if a.slots > 0 {
		r.tails = make([][]entry, len(s.wins))
		for wi, tail := range c.tails {
			r.tails[wi] = zEntries(tail.Val())
		}
		for l, tails := range c.lowTails {
			for _, tail := range tails {
				r.lowTails[l] = append(r.lowTails[l], zEntries(tail.Val()))
			}
		}
	}
	return r
}

func (s *redisStore) remove(ctx context.Context, members []string) error {
	args := toAny(members)
	return s.bounded(ctx, func(ctx context.Context) error {
		if len(s.wins) == 1 {
			return s.rdb.ZRem(ctx, s.wins[0].key, args...).Err()
		}
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, x := range s.wins {
				p.ZRem(ctx, x.key, args...)
			}
			return nil
		})
		return err
	})
}

func (s *redisStore) add(ctx context.Context, members []entry) error {
	zs := make([]redis.Z, len(members))
	for i, e := range members {
		zs[i] = redis.Z{Score: float64(e.score), Member: e.member}
	}
	return s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, x := range s.wins {
				p.ZAdd(ctx, x.key, zs...)
			}
			return nil
		})
		return err
	})
}

func (s *redisStore) now(ctx context.Context) (time.Time, error) {
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

func (s *redisStore) writeMeta(ctx context.Context, m metaWrite, ttl time.Duration) error {
	key := s.wins[0].key
	return s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if m.pause > 0 {
				// Negative scores: the lower one is the later pause.
				p.ZAddLT(ctx, key, redis.Z{Score: float64(metaScore(m.pause)), Member: pauseMember})
			}
			if len(m.set) > 0 {
				zs := make([]redis.Z, len(m.set))
				for i, e := range m.set {
					zs[i] = redis.Z{Score: float64(e.score), Member: e.member}
				}
				p.ZAdd(ctx, key, zs...)
			}
			if len(m.remove) > 0 {
				p.ZRem(ctx, key, toAny(m.remove)...)
			}
			// Never shorten the TTL another writer set for a longer pause.
			secs := ttl.Round(time.Second) + time.Second
			p.ExpireNX(ctx, key, secs)
			p.ExpireGT(ctx, key, secs)
			if m.news != nil {
				// After the write: a listener that reads the members on
				// hearing it finds them.
				p.Publish(ctx, newsChannel(key), m.news.String())
			}
			return nil
		})
		return err
	})
}

func (s *redisStore) usage(ctx context.Context, limits func(now int64, meta []float64) []int) (usageRead, error) {
	var (
		u     usageRead
		clock *redis.TimeCmd
		meta  *redis.FloatSliceCmd
		used  = make([]*redis.IntCmd, len(s.wins))
		debt  = make([]*redis.StringSliceCmd, len(s.wins))
		resv  = make([]*redis.IntCmd, len(s.wins))
		nth   = make([]*redis.ZSliceCmd, len(s.wins))
	)
	err := s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			clock = p.Time(ctx)
			meta = p.ZMScore(ctx, s.wins[0].key, pauseMember, limitMember, limitEndMember)
			return nil
		})
		if err != nil {
			return err
		}
		now := clock.Val().UnixMicro()
		u.lims = limits(now, meta.Val())
		// A second round trip, now that the server's clock and the limit in
		// force are known: what it counts is consistent within each key.
		_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for i, x := range s.wins {
				used[i] = p.ZCount(ctx, x.key, exclusive(now-x.w), itoa(now))
				debt[i] = p.ZRangeByScore(ctx, x.key, &redis.ZRangeBy{Min: exclusive(now - x.w), Max: itoa(now)})
				resv[i] = p.ZCount(ctx, x.key, exclusive(now), itoa(now+futureBound))
				nth[i] = p.ZRangeWithScores(ctx, x.key, int64(-u.lims[i]), int64(-u.lims[i]))
			}
			return nil
		})
		return err
	})
	if err != nil {
		return usageRead{}, err
	}
	u.server, u.meta = clock.Val(), meta.Val()
	for i := range s.wins {
		u.used = append(u.used, int(used[i].Val()))
		d := 0
		for _, m := range debt[i].Val() {
			if strings.HasPrefix(m, debtPrefix) {
				d++
			}
		}
		u.debt = append(u.debt, d)
		u.reserved = append(u.reserved, int(resv[i].Val()))
		u.nth = append(u.nth, zEntries(nth[i].Val()))
	}
	return u, nil
}

// errTimeout reports a Redis call that did not answer in time.
var errTimeout = errors.New("no answer within the Redis timeout")

// bounded runs a Redis call and returns by ctx's deadline even when the
// client would not (see store). When the client itself ends the call in
// time (see inline), the call runs in the caller's goroutine. Otherwise it
// runs in a helper goroutine and bounded returns at the deadline exactly: a
// call that overruns is left to finish in the background (the client's own
// timeouts end it), its results never read.
func (s *redisStore) bounded(ctx context.Context, call func(context.Context) error) error {
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
func (s *redisStore) inline(ctx context.Context) bool {
	if s.ctxTimeouts {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && s.ioTimeout > 0 && s.ioTimeout <= time.Until(deadline)+inlineSlack
}

// honoursContext reports whether the client ends a call at its context's
// deadline by itself.
func honoursContext(c redis.UniversalClient) bool {
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

// socketTimeout returns the longer of c's socket read and write timeouts
// when c is a *redis.Client that sets both, and 0 otherwise. Only a
// *redis.Client (a failover client is one), the client whose way to a
// socket inline describes: a cluster client follows redirects and reloads
// its slot map, and a ring spreads a pipeline over its shards, with calls
// of their own; without ContextTimeoutEnabled, they keep the helper
// goroutine.
func socketTimeout(c redis.UniversalClient) time.Duration {
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

// zEntries converts a ZRANGE WITHSCORES reply to entries.
func zEntries(zs []redis.Z) []entry {
	out := make([]entry, len(zs))
	for i, z := range zs {
		m, _ := z.Member.(string)
		out[i] = entry{score: int64(z.Score), member: m}
	}
	return out
}

// readMeta reads the pause and the lowered limit, as a round trip does.
func (s *redisStore) readMeta(ctx context.Context) (reply, error) {
	var v []float64
	err := s.bounded(ctx, func(ctx context.Context) (err error) {
		v, err = s.rdb.ZMScore(ctx, s.wins[0].key, pauseMember, limitMember, limitEndMember).Result()
		return err
	})
	if err != nil {
		return reply{}, err
	}
	if len(v) != 3 {
		return reply{}, errors.New("throttler: short ZMSCORE reply")
	}
	return reply{pause: metaValue(v[0]), limit: metaValue(v[1]), limitEnd: metaValue(v[2])}, nil
}

// watchNews subscribes to the news published on channel (see news.go).
func (s *redisStore) watchNews(channel string) *subscription {
	return s.subscribe(channel, func(string) bool { return true })
}
