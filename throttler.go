// Package throttler delays outbound calls so that every replica of a service
// shares one quota, kept in Redis: no window of length interval ever holds
// more than limit admitted calls, however many processes and goroutines share
// the key.
//
// The quota is a sliding-window log in one Redis sorted set: each admitted
// call is a member whose score is its admission time on the Redis server's
// clock. A call is admitted at score g only if no window of length
// w = interval+buffer that holds g would hold more than limit members with
// it. Each process adds its member before it counts the members within
// (g-w, g+w), which bound every such window (under several limits, rounds
// near the limit read the fullest such window itself), so two processes
// racing for the last slot each count the other, and at most one is
// admitted (both may be refused). A caller over the limit is given the
// earliest future slot and sleeps once until then; it does not poll.
//
// A Throttler is safe for concurrent use by multiple goroutines. Waiters on
// one Throttler are served by priority (see ContextWithPriority), then in
// the order they joined the queue (see WaitN), with AllowN calls ahead of
// them all, except that a waiter whose claim a round trip did not admit,
// or that waited for a place in flight (WithInFlight), goes back to the
// head of the queue, ahead of waiters of any priority. Their reservations
// are batched: one Redis round trip serves as many as fit.
//
// # Tenants
//
// One quota often serves many tenants: the customers behind the chat
// completions made with one organisation key. A call's tenant comes from
// its context (ContextWithTenant), so that Wait, WaitN, Do, DoCost, Wrap,
// WrapCost, Acquire (what its Permit settles counts for the same tenant),
// the Transport and throttlergrpc's interceptors carry it; a Transport may
// also name each request's tenant itself (Transport.Tenant). The empty
// tenant is no tenant, and AllowN's calls have none (but under
// WithShadow).
//
// Within one process, the calls of one priority that wait are served in a
// fair order across their tenants: start-time fair queuing in units, by
// each tenant's weight (WithTenantWeight). A tenant that queues one call
// behind another's flood is served next, not after the flood.
//
// Across replicas, a tenant whose calls wait behind its own (backlogged)
// is held to a fair share of each window, checked in Redis in the same
// round trip as its claims: the backlogged tenants share by weight what
// the other tenants leave of the limit, less a spare left free for their
// next calls; a tenant that asks for less than its share gets what it
// asks, and a tenant alone is held to nothing. The limit holds whatever
// the tenants.
//
// How tenants compose with the rest:
//   - Priorities come first: a higher priority's calls queue ahead of
//     every tenant's, and the tenants share within a priority; a tenant
//     held to its share waits for the room its share leaves, whatever its
//     calls' priority.
//   - A share counts units: WaitN(ctx, 5) counts 5, and what Settle adds
//     past an estimate counts for the call's tenant.
//   - Under Group, each credential's Throttler has shares of its own: a
//     tenant's share of one credential takes nothing of another's.
//   - With WithInFlight, places go in each process's order; the shares
//     are of the rate.
//   - Under several limits (WithLimit), the shares are those of the first
//     limit's key, and every limit holds.
//   - The shares count the first key's members: on a compacted key
//     (WithCompactFrom; from a limit of 5,000 by default) the calls moved
//     into buckets count for no tenant, and the caps no longer hold a
//     flood across replicas (the first call of a tenant there logs a
//     warning); keep a key whose tenants share a log with
//     WithCompactFrom(0). Calls admitted while Redis failed are written
//     back as no tenant's.
//
// Redis keeps nothing per tenant but 17 bytes on each of its calls'
// members, which leave with them; a process keeps a tenant while its
// calls wait, and in Stats.Tenants among at most 100 (TenantStats); an
// Observer sees each wait's tenant (WaitInfo.Tenant). See
// docs/design.md, "Tenants", for how the shares are worked out.
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
	clock *core.Clock // its own, or its Group's (see withClockSync)
	stats meter

	// mu guards the fields below it and the waiters' changing fields (see
	// waiter). The one lock rule: a function that reads or writes them
	// either runs with mu held, as its name says (a Locked suffix) or its
	// receiver does (a method of one of the types below, each owning its
	// fields), or takes mu itself and releases it before it returns. No
	// function releases mu for its caller or is handed a mutex; what must
	// happen after the release is returned to the caller to run (see
	// afterUnlock). Nothing under mu waits for Redis or another goroutine:
	// Observers called under it must return quickly (see Observer).
	mu       sync.Mutex
	worker   workerState // the queue and the worker that serves it
	known    core.Known  // what the last reply told of the room ahead
	shared   sharedState // the pause and lowered limit every process agrees on
	health   health      // what tells that Redis lost the window (see heal.go)
	fallback fallback    // serving calls while Redis fails (see fallback.go)
	owed     owed        // what this process still has to write to Redis
	upkeep   upkeep      // when each kind of upkeep last rode on a round trip
	lease    *leases     // places in flight (WithInFlight), or nil
	news     newsState   // listening for pauses and lowered limits (see news.go)

	sends sendLead // how long before their slots a Transport's calls go to get their connections (see sendgate.go)
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
// Make one Throttler per key in a process, once, and share it between
// goroutines: it is safe for concurrent use, and two Throttlers on one key
// in one process only cost more round trips. It needs no Close: its
// goroutines (one that makes the round trips, and one that listens for
// other processes' news while calls wait near the limit) run only while it
// has calls waiting or something to write to Redis, and exit on their own;
// a Throttler no longer used is garbage collected. Closing the client ends
// it: calls then fail with an error wrapping ErrRedis (or follow the
// failure policy), and the goroutine exits at its next round trip (up to
// a second later, after a failure: a test that checks for leaked
// goroutines once the client is closed should allow for it).
//
// New checks its arguments and options and returns an error wrapping
// ErrInvalidArgument when one is bad. It does no network I/O.
func New(client redis.UniversalClient, key string, limit int, interval time.Duration, opts ...Option) (*Throttler, error) {
	if client == nil {
		return nil, invalidf("New: nil Redis client")
	}
	c, err := newConfig(key, limit, interval, opts)
	if err != nil {
		return nil, err
	}
	o, wins := c.opt, c.rules.Wins
	ids := newMemberSource()
	t := &Throttler{
		config: c,
		st:     redisstore.NewStore(client, wins, c.rules.Longest(), o.inflight, ids.id()),
		ids:    ids,
		worker: workerState{
			kick: make(chan struct{}, 1),
			rng:  rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		},
		known: core.Known{Near: true},
		clock: o.clockSync(),
	}
	if o.observer != nil {
		t.stats.obs.Store(o.observer)
	}
	t.stats.logger, t.stats.logAttrs = o.logger, []any{slog.String("key", key), slog.String("policy", o.policy.String())}
	t.stats.tenants.idle = time.Duration(t.rules.LongestW()) * time.Microsecond
	t.opt.order.compacted = t.compactedWarning()
	t.worker.spawn = func(sleep time.Duration) { go runWorker(t, sleep) }
	// The probe is looked up in the key of the longest window, which keeps
	// a call's member the longest (see heal.go).
	t.health.journal.Cap = 2 * wins[t.rules.Longest()].Limit
	t.health.journal.W = t.rules.LongestW()
	if o.inflight != nil {
		t.lease = newLeases(o.inflight, func() { go runKeeper(t) })
	}
	if o.policy.kind == policyLocal {
		t.fallback.local = core.NewLocalWindow(o.policy.share, wins, o.buffer)
	}
	return t, nil
}

// Limit returns the number of calls allowed per interval, as given to New.
// A limit lowered by LowerLimit or by an API's answer (see Transport) does not
// change it.
func (t *Throttler) Limit() int { return firstWindow(t).Limit }

// Interval returns the length of the sliding window.
func (t *Throttler) Interval() time.Duration { return firstWindow(t).Interval }

// Key returns the Redis key holding the shared window.
func (t *Throttler) Key() string { return firstWindow(t).Key }

// firstWindow returns t's first limit's window as New was given it: a zero
// Window for a nil or zero Throttler, whose Limit, Interval and Key are
// zero.
func firstWindow(t *Throttler) core.Window {
	if t == nil || len(t.rules.Wins) == 0 {
		return core.Window{}
	}
	return t.rules.Wins[0]
}

// testHooks lets tests watch the worker. Each runs under the Throttler's
// mutex when set.
type testHooks struct {
	// onAdmit sees every admission with its server-time score in
	// microseconds and its members.
	onAdmit func(score int64, members []string)
	// onRelease sees admitted members given back because their call did
	// not go (abandoned, or woken too late).
	onRelease func(members []string)
	// onResolved (fault-injection tests) runs after a reply was applied,
	// with how many claims it rejected: their members are still in Redis
	// until the next round trip gives them back.
	onResolved func(rejected int)
}
