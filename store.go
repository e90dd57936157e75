package throttler

import (
	"context"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
)

// store is everything the worker asks of Redis, in the core's own terms:
// the seam behind which redisstore.Store speaks go-redis, and through
// which a test can put a store that fails, delays or loses writes exactly
// where it wants. Every method is bounded by its context's deadline,
// whatever the client: redisstore.Store returns at the deadline, or, where
// it leaves the client's own socket timeouts to end the call, within one
// socket write and one socket read, each within those timeouts, of the
// later of the deadline and Redis's last answer. A context cancelled
// before its deadline ends a call under way at once only where
// redisstore.Store runs it in a helper goroutine; go-redis itself sees a
// cancellation only while it waits for a connection, dials or backs off
// before a retry.
type store interface {
	// Reserve sends one round's attempt (see attempt) and returns what it
	// read. An error means the attempt may or may not have been applied.
	Reserve(ctx context.Context, a *core.Attempt) (core.Reply, error)
	// Remove takes members out of every limit's key. at, when positive,
	// is the score all of them were admitted at, and says they were
	// written for sure, so that one a compacted window already counts in
	// its bucket leaves the bucket too (see redisstore.GiveBackScript).
	Remove(ctx context.Context, members []string, at int64) error
	// Add puts members into every limit's key, counted as calls.
	Add(ctx context.Context, members []core.Entry) error
	// Now reads the server's clock.
	Now(ctx context.Context) (time.Time, error)
	// WriteMeta writes a change to the members that are not calls, in the
	// first limit's key, and keeps the key alive at least ttl.
	WriteMeta(ctx context.Context, m core.MetaWrite, ttl time.Duration) error
	// Usage reads every limit's window without changing it (see Usage);
	// limits gives the limits in force from the server's clock and the
	// pause, limit and limit-end members, as read first.
	Usage(ctx context.Context, limits func(now int64, m core.Meta) []int) (core.UsageRead, error)
	// ReleaseLeases takes places in flight back and wakes, for each, the
	// next process in the line for one (see WithInFlight); pass wakes that
	// many more, for wakes this process had no use for.
	ReleaseLeases(ctx context.Context, ids []string, pass int) error
	// Compacted reports whether some limit's key is read with its
	// buckets now (see redisstore.Store.Compacted).
	Compacted() bool
	// RenewLeases moves the expiry of places still held to the ttl from
	// now, by the server's clock, and returns the places of ids it no
	// longer holds.
	RenewLeases(ctx context.Context, ids []string) (lost []string, err error)
	// WatchLeases subscribes to the releases of places in flight.
	WatchLeases() *redisstore.Subscription
	// WatchNews subscribes to the news published on channel (see news.go).
	WatchNews(channel string) *redisstore.Subscription
	// ReadMeta reads the pause and the lowered limit.
	ReadMeta(ctx context.Context) (core.Reply, error)
	// ReadCounters reads what a Transport following an API's counters
	// needs of the shared window (see core.CountersRead): the units
	// scored in (from, to] in the first key, the lowered limit and the
	// last back-off.
	ReadCounters(ctx context.Context, from, to int64) (core.CountersRead, error)
	// ApplyCounters applies a batch of readings of an API's counter to the
	// shared limit in one step (see core.CountersApply).
	ApplyCounters(ctx context.Context, a core.CountersApply) (core.CountersApplied, error)
	// LiveLeases counts the places in flight taken now, by the server's
	// clock.
	LiveLeases(ctx context.Context) (int, error)
}
