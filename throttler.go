// Package throttler delays outbound calls so that every replica of a service
// shares one quota, kept in Redis: no window of length interval ever holds
// more than limit admitted calls, however many processes and goroutines share
// the key.
//
// The quota is a sliding-window log in one Redis sorted set: each admitted
// call is a member whose score is its admission time on the Redis server's
// clock. A call is admitted at score g only if, counted in the same
// transaction right after its member was added, the members within
// (g-interval-buffer, g+interval+buffer) leave room for it. A caller over the
// limit is given the earliest future slot and sleeps once until then; it does
// not poll.
//
// A Throttler is safe for concurrent use by multiple goroutines. Waiters on
// one Throttler are served first in, first out, and their reservations are
// batched: one Redis round trip serves as many as fit.
package throttler

import (
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Throttler shares a quota of limit calls per interval through one Redis key.
// Create it with New. It is safe for concurrent use by multiple goroutines.
type Throttler struct {
	rdb      redis.UniversalClient
	key      string
	limit    int
	interval time.Duration
	w        int64 // interval + buffer, microseconds: how long a call holds its slot
	opt      options
	wins     []window // wins[0] is the limit New was given; the others come from WithLimit
	minLimit int      // the smallest configured limit: the most one call may claim
	metaArgs []any    // ZMSCORE key marker pause limit limit-end, boxed once
	ids      *memberSource
	clock    clockSync
	now      func() time.Time
	stats    counters

	mu         sync.Mutex
	queue      []*waiter // FIFO, not yet reserved
	running    bool      // a worker goroutine serves the queue
	kick       chan struct{}
	slots      []int64   // next free slots (server µs, 0 = now) learned from the last reply
	giveBack   []string  // members to remove with the next round trip
	giveUpAt   time.Time // after a failure: when members not given back yet stop mattering (zero = none pending)
	replay     []entry   // members admitted without Redis, to count once it answers
	degraded   time.Time // while now is before it, Redis is not tried (fallback)
	near       bool      // the last reply left little room: reserve exactly (MULTI)
	journal    journal   // our admissions that still count, to heal a lost window
	healPause  int64     // server µs: the end of a heal pause still to write to Redis (0 = none); see heal.go
	shareUntil time.Time // after FallbackLocal: admissions also keep to the local share until then
	lastRound  time.Time // the last round trip that reached Redis
	lastSeen   int64     // server µs: the last round trip that found (or wrote) the marker (0 = none)
	writeMark  bool      // the marker was missing: write it with the next round trip
	lastTrim   time.Time
	lastClock  time.Time
	lastExpire time.Time
	lastLog    time.Time
	local      *localWindow // the fallback's in-process window, when configured
	scratch    roundScratch
	lateWakes  int   // calls that re-reserved after waking too late
	heals      int   // lost windows found
	pausedTill int64 // server µs: no call goes before it (a shared pause); 0 = none
	lowered    int   // the first limit lowered through Redis (SetLimit); 0 = not lowered
	lowerTill  int64 // server µs at which the lowering ends
	limitEpoch int   // grows each time the limit is lowered

	ctxTimeouts bool // the client honours context deadlines itself

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
// failover client. The Throttler uses the single key given: on Redis Cluster
// it lives in one hash slot, so put a {tag} in keys that must share a slot.
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
	if o.buffer > interval*10 && o.buffer > time.Minute {
		return nil, invalidf("New(%q): buffer %s dwarfs the interval %s", key, o.buffer, interval)
	}
	if !o.aheadSet {
		o.ahead = min(interval, time.Second)
	}
	wins := append([]window{{key: key, limit: limit, interval: interval}}, o.extra...)
	for i := range wins {
		wins[i].w = windowMicros(wins[i].interval + o.buffer)
		if err := sameSlot(wins[0].key, wins[i].key); err != nil {
			return nil, err
		}
		for _, x := range wins[:i] {
			if x.key == wins[i].key {
				return nil, invalidf("New(%q): key %q holds two limits", key, x.key)
			}
		}
	}
	t := &Throttler{
		rdb:      client,
		key:      key,
		limit:    limit,
		interval: interval,
		w:        wins[0].w,
		wins:     wins,
		opt:      o,
		ids:      newMemberSource(),
		now:      o.now,
		kick:     make(chan struct{}, 1),
		near:     true,
		clock:    newClockSync(o.now()),
	}
	t.metaArgs = []any{"zmscore", key, marker, pauseMember, limitMember, limitEndMember}
	t.minLimit = limit
	for _, x := range wins[1:] {
		t.minLimit = min(t.minLimit, x.limit)
	}
	// The probe is looked up in the first limit's key, which trims its
	// members once they leave its own window.
	t.journal.cap = 2 * limit
	t.journal.w = wins[0].w
	t.ctxTimeouts = honoursContext(client)
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

// conversionSlack covers the conversion of a score to a caller's local
// clock: each process reads its clock to the nanosecond but converts in
// whole microseconds, so two processes may place the same score up to a
// microsecond apart each. Without it, two calls scored exactly one window
// apart by different processes could go up to 2µs less than a window
// apart (seen in the simulation with a zero buffer, seeds 12, 20 and 34).
const conversionSlack = 2

// Limit returns the number of calls allowed per interval, as given to New.
// A limit lowered by SetLimit or by an API's answer (see Transport) does not
// change it.
func (t *Throttler) Limit() int { return t.limit }

// Interval returns the length of the sliding window.
func (t *Throttler) Interval() time.Duration { return t.interval }

// Key returns the Redis key holding the shared window.
func (t *Throttler) Key() string { return t.key }

// roundScratch holds the buffers of a round, reused by the next one.
type roundScratch struct {
	a      *attempt
	batch  []*waiter
	claims []claim
	ok     []bool
	lims   []int
}

// longestW is how long a call counts in the longest of its windows, in
// microseconds.
func (t *Throttler) longestW() int64 {
	w := int64(0)
	for _, x := range t.wins {
		w = max(w, x.w)
	}
	return w
}

// batchUnits is how many members one round trip may add, and how many
// upcoming slots it learns.
func (t *Throttler) batchUnits() int { return min(t.minLimit, t.opt.maxBatch) }

// logRedis logs a Redis failure at most once a second.
func (t *Throttler) logRedis(err error, what string) {
	now := t.now()
	if now.Sub(t.lastLog) < time.Second {
		return
	}
	t.lastLog = now
	t.opt.logger.Warn("throttler: redis failed", slog.String("key", t.key),
		slog.String("policy", t.opt.policy.String()), slog.String("then", what), slog.Any("err", err))
}
