// Package throttler delays outbound calls so that every replica of a service
// shares one quota, kept in Redis: no window of length interval ever holds
// more than limit admitted calls, however many processes and goroutines share
// the key.
//
// The quota is a sliding-window log in one Redis sorted set: each admitted
// call is a member whose score is its admission time on the Redis server's
// clock. A call is admitted at score g only if the members within
// (g-interval-buffer, g+interval+buffer), counted after its own member was
// added, leave room for it: every process adds before it counts, so two
// processes racing for the last slot each count the other, and at most one
// is admitted (both may be refused). A caller over the limit is given the
// earliest future slot and sleeps once until then; it does not poll.
//
// A Throttler is safe for concurrent use by multiple goroutines. Waiters on
// one Throttler are served by priority (see ContextWithPriority), then in
// the order they joined the queue (see WaitN), with AllowN calls ahead of
// them all; their reservations are batched: one Redis round trip serves as
// many as fit.
package throttler

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
)

// Throttler shares a quota of limit calls per interval through one Redis key.
// Create it with New. It is safe for concurrent use by multiple goroutines.
type Throttler struct {
	config
	st    store // Redis, behind the seam
	ids   *memberSource
	clock *clockSync // its own, or its Group's (see withClockSync)
	stats meter

	mu      sync.Mutex // guards what follows
	queue   []*waiter  // not yet reserved: AllowN first, then by priority, FIFO within one
	waiting int        // waits (any face) between enterLocked and leaveLocked (see WithMaxQueue)
	running bool       // a worker goroutine serves the queue
	kick    chan struct{}
	known   known        // what the last reply told of the room ahead
	shared  sharedState  // the pause and lowered limit every process agrees on
	health  health       // Redis's health as this process sees it: fallback and heal
	owed    owed         // what this process still has to write to Redis
	upkeep  upkeep       // when each kind of upkeep last rode on a round trip
	local   *localWindow // the fallback's in-process window, when configured
	lease   *leases      // places in flight (WithInFlight), or nil
	news    newsState    // listening for pauses and lowered limits (see news.go)
	rng     *rand.Rand   // spreads wake-ups (see jitter, sharePause)
	scratch roundScratch

	// onAdmit, when set (tests), sees every admission with its server-time
	// score in microseconds and its members, under t.mu.
	onAdmit func(score int64, members []string)
	// onRelease, when set (tests), sees admitted members given back because
	// their call did not go (abandoned, or woken too late), under t.mu.
	onRelease func(members []string)
	// onResolved, when set (fault-injection tests), runs after a reply was
	// applied, with how many claims it rejected: their members are still in
	// Redis until the next round trip gives them back. Under t.mu.
	onResolved func(rejected int)
}

// New returns a Throttler that admits at most limit calls in any window of
// length interval, counted across every Throttler on the same key and the
// same Redis. All Throttlers sharing a key must use the same limit and
// interval.
//
// client may be a *redis.Client, *redis.ClusterClient, *redis.Ring or a
// failover client. The Throttler keeps its calls in the key given, and in
// the keys WithLimit and WithInFlight name: on Redis Cluster each lives in
// one hash slot, so give keys that must share a slot the same {tag}.
//
// New checks its arguments and options and returns an error wrapping
// ErrInvalidArgument when one is bad. It does no network I/O.
func New(client redis.UniversalClient, key string, limit int, interval time.Duration, opts ...Option) (*Throttler, error) {
	switch {
	case client == nil:
		return nil, invalidf("New: nil Redis client")
	}
	if err := checkWindow("New", key, limit, interval); err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			return nil, invalidf("New(%q): nil Option", key)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if err := checkShares(o.shares); err != nil {
		return nil, err
	}
	if o.buffer > interval*10 && o.buffer > time.Minute {
		return nil, invalidf("New(%q): buffer %s dwarfs the interval %s", key, o.buffer, interval)
	}
	if !o.aheadSet {
		o.ahead = min(interval, time.Second)
	}
	wins := append([]core.Window{{Key: key, Limit: limit, Interval: interval}}, o.extra...)
	for i := range wins {
		wins[i].W = windowMicros(wins[i].Interval + o.buffer)
		if err := sameSlot(wins[0].Key, wins[i].Key); err != nil {
			return nil, err
		}
		for _, x := range wins[:i] {
			if x.Key == wins[i].Key {
				return nil, invalidf("New(%q): key %q holds two limits", key, x.Key)
			}
		}
	}
	ids := newMemberSource()
	t := &Throttler{
		config: config{wins: wins, opt: o},
		st:     redisstore.NewStore(client, wins, (&config{wins: wins}).longest(), o.inflight, ids.id()),
		ids:    ids,
		kick:   make(chan struct{}, 1),
		known:  known{near: true},
		clock:  o.clockSync(),
		rng:    rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	t.stats.obs = o.observer
	t.minLimit = limit
	for _, x := range wins[1:] {
		t.minLimit = min(t.minLimit, x.Limit)
	}
	// The probe is looked up in the key of the longest window, which keeps
	// a call's member the longest (see heal.go).
	t.health.journal.cap = 2 * wins[t.longest()].Limit
	t.health.journal.w = t.longestW()
	if o.inflight != nil {
		if err := sameSlot(wins[0].Key, o.inflight.Key); err != nil {
			return nil, err
		}
		for _, x := range wins {
			if x.Key == o.inflight.Key {
				return nil, invalidf("New(%q): WithInFlight's key %q also holds a limit", key, x.Key)
			}
		}
		t.lease = newLeases(o.inflight)
	}
	if o.policy.kind == policyLocal {
		t.local = newLocalWindow(o.policy.share, wins, o.buffer)
	}
	return t, nil
}

// windowMicros is how long a call holds its slot, in the whole server
// microseconds scores are kept in, for a window of d: d rounded up (a
// window rounded down would let two calls a fraction of a microsecond less
// than d apart), plus conversionSlack.
func windowMicros(d time.Duration) int64 {
	return int64((d+time.Microsecond-1)/time.Microsecond) + conversionSlack
}

// conversionSlack covers the conversion of a score to a caller's local clock:
// each process reads its clock to the nanosecond but converts in whole
// microseconds, so two processes may place the same score up to a microsecond
// apart each. Without it, two calls scored exactly one window apart by
// different processes could go up to 2µs less than a window apart.
const conversionSlack = 2

// Limit returns the number of calls allowed per interval, as given to New.
// A limit lowered by SetLimit or by an API's answer (see Transport) does not
// change it.
func (t *Throttler) Limit() int { return t.wins[0].Limit }

// Interval returns the length of the sliding window.
func (t *Throttler) Interval() time.Duration { return t.wins[0].Interval }

// Key returns the Redis key holding the shared window.
func (t *Throttler) Key() string { return t.wins[0].Key }

// logRedis logs a Redis failure at most once a second.
func (t *Throttler) logRedis(err error, what string) {
	now := t.now()
	if now.Sub(t.upkeep.log) < time.Second {
		return
	}
	t.upkeep.log = now
	t.opt.logger.Warn("throttler: redis failed", slog.String("key", t.wins[0].Key),
		slog.String("policy", t.opt.policy.String()), slog.String("then", what), slog.Any("err", err))
}
