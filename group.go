package throttler

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// Group gives each key its own shared quota, for an API that meters each of
// the credentials it is called with apart (a GitHub App installation, a
// Shopify store, an API key): g.For(key) returns the key's Throttler, made
// on first use with the KeyQuota that the limits function gives for the key,
// and kept until it is idle, when the Group evicts it (or until a higher
// limit is learned for the key, see Learn).
//
// Every Group made on the same Redis with the same prefix and limits
// function, in any process, shares each key's quota as Throttlers on one
// key do (see New): no window of a limit's interval holds more than its
// limit of calls admitted for the key, across every replica.
//
// A key never leaves the process in clear. Its Redis keys are named by the
// first 12 bytes of its SHA-256 digest, prefix + "{" + 16 characters of
// URL-safe base64 + "}" (the digest in braces: every key of one credential
// lies in one Redis Cluster slot, and credentials spread over the slots;
// two credentials share a digest with probability 2^-96, and would then
// share one quota, never exceed it), and so are its
// Throttler's Key, errors and logs; the Group holds the digest, not the
// key, and Stats name no key. Only the limits function sees the key, and
// an error it returns is passed on as it is: it should not quote a secret
// key. Use ByHeader to key requests by a secret header: its keys are
// digests already.
//
// A key's Throttler is idle when no call waits on it or sleeps toward a
// slot reserved ahead (an admitted call counts until its slot plus the
// buffer has passed), no worker or lease keeper of its runs, it owes Redis
// nothing (a slot to give back, a call admitted without Redis to count),
// it holds and wants no place in flight, it serves no call under FailOpen
// or FallbackLocal and its fallback window holds no call, and no shared
// pause it knows of is in force. An idle Throttler holds no goroutine.
// The Group runs none either: each For moves a clock hand over at most 4
// keys (passing over the one it is asked for), and evicts a key it finds
// idle that neither For handed out nor a round trip used since the hand
// last passed it; Sweep evicts every idle key at once. Without calls to
// For, nothing is evicted until the next For or Sweep.
//
// An evicted Throttler keeps working for a caller that still holds it,
// but For makes a new one for the key: the two then share the key's quota
// as two replicas would (nothing goes over the limit), and this process's
// calls on the key are no longer served in one first-come order. Call For
// for each call (a SHA-256 and a map lookup) rather than keep its result.
// Eviction also forgets what the Throttler knew of the key's window, by
// which a Throttler notices a Redis that lost it (see docs/guarantees.md):
// its own calls that still count (the probe), when it last found the
// marker, and the tally it last read. The key's next Throttler starts as
// a new replica does, and cannot tell a lost window from a new key: a
// window lost within the longest interval of the eviction, while this
// process's calls still count in it, is noticed by the replicas that
// still hold the key, if any, not by this one.
//
// A Group is safe for concurrent use by multiple goroutines.
type Group struct {
	client redis.UniversalClient
	prefix string
	limits func(key string) (KeyQuota, error)
	opt    groupOptions
	values *redisstore.Values // the Group's own Redis calls (learned limits), bounded as a Throttler's are
	// The estimate of the server's clock its Throttlers share, on a client
	// of one server (a cluster's or a ring's servers each have their own).
	clock     *core.Clock
	logged    atomic.Int64    // when logOnce last logged, in Unix nanoseconds
	compacted compactedShares // its Throttlers' one warning that tenants meet a compacted window

	mu   sync.Mutex // guards what follows
	byID map[keyID]*groupEntry
	ring []*groupEntry // every entry, in the order the hand visits them
	hand int           // the index in ring of the next entry to visit
	peak int           // the most entries held since byID was last rebuilt (see shrinkLocked)
	// AddObserver's, for every Throttler For hands out.
	observers []func(*Throttler) Observer

	// onMake, when set (tests), sees each Throttler For makes, before it
	// is handed out.
	onMake func(*Throttler)

	making singleflight.Group // For's makes, one at a time per key
}

// KeyQuota is what a Group's Throttler enforces for one key: what the limits
// function returns for it. Every replica must give a key the same KeyQuota,
// as every Throttler on a key must use the same limits.
type KeyQuota struct {
	// Limit calls per Interval: the first limit, New's.
	Limit    int
	Interval time.Duration
	// More are limits every call counts against too, each in its own Redis
	// key next to the first (see WithLimit), named by its place in More.
	More []Rate
	// InFlight, when positive, caps the key's calls in flight at once
	// across every replica (see WithInFlight), with leases of InFlightTTL
	// (zero means WithInFlight's default).
	InFlight    int
	InFlightTTL time.Duration
	// Pacing, when positive, spreads the first limit over its interval:
	// at most Pacing calls in any window of Interval*Pacing/Limit (see
	// WithPacing).
	Pacing int
}

// Rate is one limit of a KeyQuota: at most Limit calls in any window of
// length Interval.
type Rate struct {
	Limit    int
	Interval time.Duration
}

// GroupOption configures a Group. Options are checked by NewGroup: a bad
// value makes NewGroup return an error wrapping ErrInvalidArgument.
type GroupOption func(*groupOptions) error

type groupOptions struct {
	logger  *slog.Logger
	learned bool     // WithLearnedLimits
	opts    []Option // WithThrottlerOptions
}

// WithThrottlerOptions gives every Throttler the Group makes these
// options (WithBuffer, WithFailurePolicy, WithMaxWait, WithObserver...),
// before those the KeyQuota makes. An Observer given here must not call
// the Group. NewGroup refuses a nil Option and a bad one, and the options
// that shape a key's quota, which name Redis keys of their own: WithLimit,
// WithInFlight and WithPacing belong in KeyQuota (More, InFlight, Pacing).
func WithThrottlerOptions(opts ...Option) GroupOption {
	return func(o *groupOptions) error {
		probe := defaultOptions()
		for _, opt := range opts {
			if opt == nil {
				return invalidf("WithThrottlerOptions: nil Option")
			}
			if err := opt(&probe); err != nil {
				return err
			}
		}
		if len(probe.limits.extra) > 0 || probe.limits.pace > 0 || probe.inflight != nil {
			return invalidf("WithThrottlerOptions: WithLimit, WithInFlight and WithPacing shape a key's quota: use KeyQuota's More, InFlight and Pacing")
		}
		o.opts = append(o.opts, opts...)
		return nil
	}
}

// WithGroupLogger sets where the Group logs what it does not return as an
// error: a request Route sends unthrottled because For failed, a learned
// limit it could not read. Default slog.Default(). It logs at most once a
// second, and names a key only by its digest.
func WithGroupLogger(l *slog.Logger) GroupOption {
	return func(o *groupOptions) error {
		if l == nil {
			return invalidf("WithGroupLogger(nil)")
		}
		o.logger = l
		return nil
	}
}

// NewGroup returns a Group whose Throttlers keep their windows in client,
// under Redis keys named by prefix and each key's digest (see Group), with
// the KeyQuota limits returns for each key. It returns an error wrapping ErrInvalidArgument when client
// or limits is nil, when prefix is empty or holds a brace (the braces are
// the Group's: a {tag} in prefix would put every key in one Redis Cluster
// slot), or when an option is bad. It does no network I/O.
func NewGroup(client redis.UniversalClient, prefix string, limits func(key string) (KeyQuota, error), opts ...GroupOption) (*Group, error) {
	switch {
	case client == nil:
		return nil, invalidf("NewGroup: nil Redis client")
	case limits == nil:
		return nil, invalidf("NewGroup(%q): nil limits function", prefix)
	case prefix == "":
		return nil, invalidf("NewGroup: empty prefix")
	case strings.ContainsAny(prefix, "{}"):
		return nil, invalidf("NewGroup(%q): the prefix must not hold a brace: the Group puts each key's digest in braces", prefix)
	}
	o := groupOptions{logger: slog.Default()}
	for _, opt := range opts {
		if opt == nil {
			return nil, invalidf("NewGroup(%q): nil GroupOption", prefix)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	g := &Group{
		client: client,
		prefix: prefix,
		limits: limits,
		opt:    o,
		values: redisstore.NewValues(client),
		byID:   map[keyID]*groupEntry{},
	}
	if _, ok := client.(*redis.Client); ok {
		c := core.NewClock(time.Now())
		g.clock = &c
	}
	return g, nil
}

// keyID is what the Group knows of a key: the first 12 bytes of its
// SHA-256 digest. Two keys share one with probability 2^-96: among ten
// million keys, some two do with probability under 10^-15.
type keyID [12]byte

func idOf(key string) keyID {
	sum := sha256.Sum256([]byte(key))
	return keyID(sum[:12])
}

// redisKey is the Redis key of id's first limit; its other keys add a
// suffix to it. Its 16 characters of base64 take 16 bytes fewer than 32
// hex digits would, in each of the credential's Redis keys (see
// bench/README.md, "Memory: a daily quota, and a quota per key").
func (g *Group) redisKey(id keyID) string {
	return g.prefix + "{" + base64.RawURLEncoding.EncodeToString(id[:]) + "}"
}

// groupEntry is one key the Group holds.
type groupEntry struct {
	id keyID
	t  *Throttler
	// For handed t out since the hand last visited the entry.
	used bool
	// t's last round trip that reached Redis, as of the hand's last visit:
	// a later one means t was used (by a caller that kept it).
	round time.Time
	at    int // the entry's index in ring
	// The limit above t's the key stated when t's entry was last made
	// anew for one (see outgrownLocked): not again for the same.
	outgrew int64
}

// groupVisits is how many entries each For visits. Each idle entry takes
// two visits to evict (the first finds it handed out when it was made), so
// visiting more than two per For evicts idle entries faster than For can
// make new ones: the Group holds about the keys used within the last lap
// of the hand.
const groupVisits = 4

// For returns key's Throttler: the same one on every call, until the Group
// evicts it (only when it is idle: see Group), or makes it anew with a
// higher limit learned for the key (see Learn). For a key it holds no
// Throttler for, it calls limits(key) and makes one with the KeyQuota
// returned (with WithLearnedLimits, the first limit learned for the key, when
// one is recorded). Calls of For that find no Throttler for a key at the
// same moment wait for one call of the limits function, and share the
// Throttler it makes (golang.org/x/sync/singleflight). Should two calls
// of For still each make one for a key (the second began before the
// first's was held), both return the one held first, and the other is
// dropped unused.
//
// For returns an error when key is empty or New refuses the KeyQuota (both
// wrapping ErrInvalidArgument), and one wrapping the limits function's
// error when it fails; errors name the key only by its Redis key. For does
// no network I/O, except with WithLearnedLimits, which reads the key's
// learned limit from Redis (one GET, within a second) when it makes a
// Throttler.
func (g *Group) For(key string) (*Throttler, error) {
	if key == "" {
		return nil, invalidf("Group.For: empty key")
	}
	id := idOf(key)
	g.mu.Lock()
	g.sweepLocked(groupVisits, id)
	old := g.byID[id]
	if old != nil && !g.outgrownLocked(old) {
		old.used = true
		g.mu.Unlock()
		return old.t, nil
	}
	g.mu.Unlock()

	v, err, _ := g.making.Do(string(id[:]), func() (any, error) { return g.make(key, id) })
	if err != nil {
		return nil, err
	}
	t := v.(*Throttler)
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.byID[id]
	if e != nil && e != old { // made by another caller meanwhile
		e.used = true
		return e.t, nil
	}
	if e != nil {
		g.removeLocked(e) // outgrown: replaced, it serves the calls it has
	}
	g.observeLocked(t)
	e = &groupEntry{id: id, t: t, used: true, at: len(g.ring)}
	if old != nil {
		e.outgrew = old.outgrew
	}
	g.byID[id] = e
	g.ring = append(g.ring, e)
	g.peak = max(g.peak, len(g.ring))
	return t, nil
}

// outgrownLocked reports whether e's Throttler should be made anew, with
// a higher limit learned for its key (see Learn): its last round trip
// found the key stating a first limit above its own, which it has not
// been made anew for yet.
func (g *Group) outgrownLocked(e *groupEntry) bool {
	above := e.t.shared.above.Load()
	if !g.opt.learned || above == 0 || above == e.outgrew {
		return false
	}
	e.outgrew = above
	return true
}

// make makes key's Throttler.
func (g *Group) make(key string, id keyID) (*Throttler, error) {
	base := g.redisKey(id)
	q, err := g.limits(key)
	if err != nil {
		return nil, fmt.Errorf("throttler: Group.For(%s): limits: %w", base, err)
	}
	if g.opt.learned {
		if n, ok := g.learnedLimit(base); ok {
			q.Limit = n
		}
	}
	if q.InFlight < 0 {
		return nil, invalidf("Group.For(%s): KeyQuota.InFlight %d is negative", base, q.InFlight)
	}
	if q.Pacing < 0 {
		return nil, invalidf("Group.For(%s): KeyQuota.Pacing %d is negative", base, q.Pacing)
	}
	opts := make([]Option, 0, len(g.opt.opts)+len(q.More)+3)
	opts = append(opts, g.opt.opts...)
	if q.Pacing > 0 {
		opts = append(opts, WithPacing(q.Pacing))
	}
	if g.clock != nil {
		opts = append(opts, withClockSync(g.clock))
	}
	opts = append(opts, withCompactedShares(&g.compacted))
	for i, r := range q.More {
		opts = append(opts, WithLimit(base+":"+strconv.Itoa(i+2), r.Limit, r.Interval))
	}
	if q.InFlight > 0 {
		opts = append(opts, WithInFlight(base+":inflight", q.InFlight, q.InFlightTTL))
	}
	t, err := New(g.client, base, q.Limit, q.Interval, opts...)
	if err == nil && g.onMake != nil {
		g.onMake(t)
	}
	return t, err
}

// Len returns how many keys the Group holds a Throttler for.
func (g *Group) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.ring)
}

// Sweep evicts every key whose Throttler is idle now (see Group), however
// recently it was used, and returns how many it evicted. It visits every
// key once, under the Group's lock: For waits for it.
func (g *Group) Sweep() (evicted int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := 0; i < len(g.ring); {
		e := g.ring[i]
		if idle, _ := e.t.dormant(); idle {
			g.removeLocked(e)
			evicted++
			continue // the last entry moved to i
		}
		i++
	}
	g.hand = 0
	g.shrinkLocked()
	return evicted
}

// sweepLocked moves the hand over up to visits entries, and evicts those
// idle and unused since its last visit. It passes over skip's entry, which
// the caller is about to hand out.
func (g *Group) sweepLocked(visits int, skip keyID) {
	for range min(visits, len(g.ring)) {
		if g.hand >= len(g.ring) {
			g.hand = 0
		}
		e := g.ring[g.hand]
		if e.id != skip && g.evictable(e) {
			g.removeLocked(e) // the last entry moves to the hand: visited next
			continue
		}
		g.hand++
	}
	g.shrinkLocked()
}

// evictable reports whether e's Throttler is idle and was not used since
// the hand last visited e, and notes what it saw for the next visit.
func (g *Group) evictable(e *groupEntry) bool {
	idle, round := e.t.dormant()
	used := e.used || !round.Equal(e.round)
	e.used, e.round = false, round
	return idle && !used
}

// removeLocked evicts e: the last entry of ring takes its place.
func (g *Group) removeLocked(e *groupEntry) {
	last := g.ring[len(g.ring)-1]
	g.ring[e.at], last.at = last, e.at
	g.ring[len(g.ring)-1] = nil
	g.ring = g.ring[:len(g.ring)-1]
	delete(g.byID, e.id)
}

// shrinkLocked gives memory back once the Group holds a quarter of the
// entries it held at its peak: a Go map keeps the room it grew to, and a
// slice its array. Rebuilding costs one pass over what is left, at most
// once per three quarters of the peak evicted.
func (g *Group) shrinkLocked() {
	if g.peak < 64 || len(g.ring) > g.peak/4 {
		return
	}
	g.ring = append([]*groupEntry(nil), g.ring...) // nil when empty: no array kept
	g.byID = make(map[keyID]*groupEntry, len(g.ring))
	for _, e := range g.ring {
		g.byID[e.id] = e
	}
	g.peak = len(g.ring)
}
