package throttler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// attempt is one reservation round trip. For each limit (window) of the
// Throttler, on its key, it gives back rejected members, adds new members at
// the scores they would be admitted at, counts the neighbourhood of each new
// score, and, near the limit, reads the upcoming free slots; on the first
// limit's key it also reads the members that are not calls (the marker, a
// shared pause, a lowered limit) and checks that Redis still holds the
// window (see journal and marker):
//
//	MULTI                                       (exact attempts only)
//	ZREM key <given back>...                    (when there are any)
//	ZREMRANGEBYSCORE key 0 (<now-w-1s>          (at most every 100ms, with
//	ZREMRANGEBYSCORE key (<now+1h> +inf          garbage no Throttler wrote)
//	ZADD key <g1> <m1> <g1> <m2> ... [-1 <marker>]
//	ZCOUNT key (<g-w> (<g+w>                    (once per distinct score g)
//	ZRANGE key -(limit+extra) -(limit-k+1) WITHSCORES   (exact attempts only)
//	PEXPIRE key <ttl>                           (at most every second, and on a new key)
//	... the same for the key of every other limit (WithLimit) ...
//	ZMSCORE key <marker> <pause> <limit> <limit-end> <our newest member>
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
	remove []string
	adds   []entry
	checks []int64       // distinct scores among adds
	lims   []int         // the limit in force per window
	slots  int           // k: how many upcoming free slots to learn (0 = none)
	exact  bool          // MULTI/EXEC; otherwise a plain pipeline
	trim   bool          // include the ZREMRANGEBYSCORE trim
	clock  bool          // include TIME
	expire bool          // include PEXPIRE
	ttl0   time.Duration // the first key's TTL (longer during a pause)

	soonest int64  // the score of a call that goes as soon as the reply is back
	probe   string // a member of ours that must still be in the set ("" = none)
	mark    bool   // write the marker
	pause   int64  // server µs: write a shared pause until then (a heal; 0 = none)
	room    int    // units of the batch (or fair share) left unclaimed
	// The generation of the clock estimate the scores were computed with
	// (see clockSync.serverGen).
	clockGen uint64
}

// reply is what an attempt's round trip returned.
type reply struct {
	counts [][]int64 // per window, per check
	tails  [][]entry // per window
	lost   bool      // the probe member is gone: Redis lost the window
	// The clock sample showed a clock step: the attempt's scores came
	// from an estimate now known wrong, so its counts decide nothing.
	stepped bool
	noMark  bool // the marker member was missing before this attempt wrote it
	// The server's clock as the round trip read it, in µs (0 = not read).
	server int64
	// The members that are not calls, in server µs (0 = absent).
	pause, limit, limitEnd int64
}

// marker is a member at score -1, where no window counts it and no trim
// reaches it: how a process tells a window Redis lost from a key that
// expired (see heal.go).
const marker = "\x00throttler"

// trimFloor is the lowest score a trim removes: the marker sits below it.
const trimFloor = "0"

// trimSlack keeps members a second past their window before trimming, so
// that a client whose server-time estimate runs ahead by less than that
// never trims a member another still counts.
const trimSlack = int64(time.Second / time.Microsecond)

// exec runs the attempt.
func (t *Throttler) exec(ctx context.Context, a *attempt) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, t.opt.redisTimeout)
	defer cancel()

	// Trims of expired members take the server's last reading of its own
	// clock, not the estimate of its now: that reading is never ahead of
	// the server, so a trim never removes a member that still counts,
	// however wrong the local clock (stepped, or without a monotonic
	// reading) has made the estimate.
	serverNow := t.clock.lastServer()
	// Trims of garbage far in the future take the estimate of the server's
	// now instead: the last reading can be hours old in a process that made
	// no round trip since, and "an hour past it" would then remove every
	// live member (simulation seed 663). The estimate is off by half a
	// round trip, or by a clock step not yet seen, far less than the hour.
	future := max(serverNow, t.clock.server(t.now())) + futureBound

	extra := len(a.adds)
	var (
		counts = make([]*redis.IntCmd, 0, len(t.wins)*len(a.checks)) // window by window
		tails  []*redis.ZSliceCmd
		clock  *redis.TimeCmd
		checks *redis.FloatSliceCmd
	)
	if a.slots > 0 {
		tails = make([]*redis.ZSliceCmd, len(t.wins))
	}
	zs := make([]redis.Z, len(a.adds), len(a.adds)+1)
	for i, e := range a.adds {
		zs[i] = redis.Z{Score: float64(e.score), Member: e.member}
	}
	if a.mark {
		zs = append(zs, redis.Z{Score: -1, Member: marker})
	}
	var remove []any
	if len(a.remove) > 0 {
		remove = toAny(a.remove)
	}
	queue := func(p redis.Pipeliner) error {
		for wi, x := range t.wins {
			if remove != nil {
				p.ZRem(ctx, x.key, remove...)
			}
			if a.trim && serverNow > 0 {
				p.ZRemRangeByScore(ctx, x.key, trimFloor, exclusive(serverNow-x.w-trimSlack))
				p.ZRemRangeByScore(ctx, x.key, exclusive(future), "+inf")
			}
			if wi == 0 && a.pause > 0 {
				// Before the marker: a marker present means the pause
				// written with it is there too.
				p.ZAddLT(ctx, x.key, redis.Z{Score: float64(-a.pause), Member: pauseMember})
			}
			add := zs
			if wi > 0 {
				add = zs[:len(a.adds)] // the marker lives in the first key only
			}
			if len(add) > 0 {
				p.ZAdd(ctx, x.key, add...)
			}
			for _, g := range a.checks {
				counts = append(counts, p.ZCount(ctx, x.key, exclusive(g-x.w), exclusive(g+x.w)))
			}
			if a.slots > 0 {
				lim := a.lims[wi]
				tails[wi] = p.ZRangeWithScores(ctx, x.key, int64(-(lim + extra)), int64(-(lim - a.slots + 1)))
			}
			if a.expire {
				ttl := t.ttl(x)
				if wi == 0 {
					ttl = a.ttl0
				}
				p.PExpire(ctx, x.key, ttl)
			}
		}
		// The checks come after the counts: without MULTI, a loss can fall
		// between two commands of the pipeline, and counts taken after it
		// must not go unnoticed. Counts taken before it were true.
		// ZMSCORE from arguments boxed once, in New: one allocation here
		// instead of one per argument.
		args := make([]any, len(t.metaArgs), len(t.metaArgs)+1)
		copy(args, t.metaArgs)
		if a.probe != "" {
			args = append(args, a.probe)
		}
		checks = redis.NewFloatSliceCmd(ctx, args...)
		p.Process(ctx, checks)
		if a.clock {
			clock = p.Time(ctx)
		}
		return nil
	}
	sent := t.now()
	err := t.bounded(ctx, func(ctx context.Context) error {
		var err error
		if a.exact {
			_, err = t.rdb.TxPipelined(ctx, queue)
		} else {
			_, err = t.rdb.Pipelined(ctx, queue)
		}
		return err
	})
	recv := t.now()
	if err != nil {
		t.observeRedisError(err)
		return reply{}, err
	}
	t.stats.roundTrips.Add(1)
	stepped, serverAt := false, int64(0)
	if clock != nil {
		stepped = t.clock.observe(sent, recv, clock.Val())
		serverAt = clock.Val().UnixMicro()
	}
	// Another round trip (an Allow's, the worker's) may have seen the step
	// first: this one's sample then agrees with the restarted estimate,
	// while its scores came from the old one. (Simulation seed 377: a
	// claim scored 7.8s ahead was admitted at once.)
	stepped = stepped || t.clock.since(a.clockGen)
	// ZMSCORE answers nil for a missing member, which go-redis reads as 0:
	// no member of ours, nor the marker, ever scores exactly 0.
	found := checks.Val()
	meta := func(i int) int64 {
		if i < len(found) {
			return -int64(found[i])
		}
		return 0
	}
	r := reply{
		counts:   make([][]int64, len(t.wins)),
		noMark:   meta(0) == 0,
		pause:    max(0, meta(1)),
		limit:    max(0, meta(2)),
		limitEnd: max(0, meta(3)),
		lost:     a.probe != "" && meta(4) == 0,
		stepped:  stepped,
		server:   serverAt,
	}
	flat := make([]int64, len(counts))
	for i, c := range counts {
		flat[i] = c.Val()
	}
	for wi := range t.wins {
		r.counts[wi] = flat[wi*len(a.checks) : (wi+1)*len(a.checks)]
	}
	if a.slots > 0 {
		r.tails = make([][]entry, len(t.wins))
		for wi, tail := range tails {
			r.tails[wi] = zEntries(tail.Val())
		}
	}
	return r, nil
}

// decide returns which claims of the attempt fit under every limit, given
// the limits in force (as the reply told them: the counts are exact under
// whichever limit holds, so the newest word on the limit is the one to
// use). Each
// limit keeps claims greedily on its own (see admit); a claim is admitted
// only when all keep it. A claim one limit would have kept but another
// refused still counts against the first's later claims in this attempt,
// which can only refuse more, never admit more.
func (t *Throttler) decide(a *attempt, lims []int, r reply, claims []claim, ok []bool) []bool {
	ok = admit(claims, a.checks, r.counts[0], lims[0], t.wins[0].w, ok)
	for wi := 1; wi < len(t.wins); wi++ {
		more := admit(claims, a.checks, r.counts[wi], lims[wi], t.wins[wi].w, nil)
		for i := range ok {
			ok[i] = ok[i] && more[i]
		}
	}
	return ok
}

// upcoming returns the next free slots under every limit: for j = 0..k-1,
// the earliest score at which j+1 members could be added at once under all
// limits, the latest of each limit's (see nextSlots).
func (t *Throttler) upcoming(a *attempt, r reply, dropped []entry, extra int) []int64 {
	var slots []int64
	limit := t.clock.server(t.now()) + futureBound
	for wi, x := range t.wins {
		s := nextSlots(sane(r.tails[wi], limit), dropped, a.lims[wi], a.slots, extra, x.w)
		if wi == 0 {
			slots = s
			continue
		}
		slots = slots[:min(len(slots), len(s))]
		for j := range slots {
			slots[j] = max(slots[j], s[j])
		}
	}
	return slots
}

// exclusive formats an exclusive score bound, "(v".
func exclusive(v int64) string {
	var b [24]byte
	return string(strconv.AppendInt(append(b[:0], '('), v, 10))
}

// itoa formats an inclusive score bound.
func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// futureBound is how far past the server's now a member's score can lie
// when a Throttler wrote it: WithReserveAhead is capped well below it. A
// member beyond it (a seed-design "pending" score a year ahead, or garbage)
// counts in no window; it is trimmed with the expired ones.
const futureBound = int64(time.Hour / time.Microsecond)

// sane returns tail without members scored after limit (server µs):
// garbage beyond futureBound would otherwise pass for the newest calls when
// slots are worked out.
func sane(tail []entry, limit int64) []entry {
	for i, e := range tail {
		if e.score > limit {
			return tail[:i]
		}
	}
	return tail
}

// ttl keeps the key alive for as long as its newest member can matter: a
// member is at most ahead in the future and counts for w after its score.
func (t *Throttler) ttl(x window) time.Duration {
	return time.Duration(x.w)*time.Microsecond + t.opt.ahead + 2*time.Second
}

// syncClock takes a first sample of the server clock.
func (t *Throttler) syncClock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.opt.redisTimeout)
	defer cancel()
	sent := t.now()
	var server time.Time
	err := t.bounded(ctx, func(ctx context.Context) (err error) {
		server, err = t.rdb.Time(ctx).Result()
		return err
	})
	if err != nil {
		return err
	}
	t.clock.observe(sent, t.now(), server)
	return nil
}

// release removes members synchronously; what it cannot remove is given
// back with the next round trip (and expires on its own regardless).
func (t *Throttler) release(ctx context.Context, members []string) {
	if len(members) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.releaseTimeout())
	defer cancel()
	args := toAny(members)
	err := t.bounded(ctx, func(ctx context.Context) error {
		if len(t.wins) == 1 {
			return t.rdb.ZRem(ctx, t.key, args...).Err()
		}
		_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, x := range t.wins {
				p.ZRem(ctx, x.key, args...)
			}
			return nil
		})
		return err
	})
	if err != nil {
		t.observeRedisError(err)
		t.mu.Lock()
		t.giveBack = append(t.giveBack, members...)
		t.logRedis(err, "members given back later")
		t.mu.Unlock()
	}
}

// errTimeout reports a Redis call that did not answer in time.
var errTimeout = errors.New("no answer within the Redis timeout")

// bounded runs a Redis call and returns by ctx's deadline even when the
// client would not: go-redis only honours context deadlines when the client
// was built with ContextTimeoutEnabled, and otherwise waits out its own read
// timeout. A call that overruns is left to finish in the background (the
// client's own timeouts end it); its results are never read.
func (t *Throttler) bounded(ctx context.Context, call func(context.Context) error) error {
	if t.ctxTimeouts {
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

// honoursContext reports whether the client ends a call at its context's
// deadline by itself.
func honoursContext(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// releaseTimeout bounds how long an abandoned call spends giving its slot
// back, so that cancellation stays prompt when Redis hangs.
func (t *Throttler) releaseTimeout() time.Duration {
	return min(t.opt.redisTimeout, 250*time.Millisecond)
}
