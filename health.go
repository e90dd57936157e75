package throttler

import (
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// health is what lets a round trip tell that Redis lost the window (see
// heal.go), guarded by the Throttler's mu.
type health struct {
	lastSeen int64 // server µs: the last round trip that found (or wrote) the marker (0 = none)
	// Server µs: the latest time a reply read on the server's clock. The
	// journal is trimmed no later than it: an estimate a local clock step
	// moved ahead would otherwise drop calls that still count, and with
	// them the probes that tell their loss (seed 547).
	serverSeen int64
	journal    core.Journal // our admissions that still count: the probe for a lost window
	planned    uint64       // the journal's Mark when the round trip in flight was planned
	// The Marks of the round trips whose newest probe could not tell (see
	// heal.go), oldest first: each round trip also probes the newest call
	// journaled before the first, until one is found.
	unsure []uint64
	// The older probe of the round trip in flight is its newest too.
	olderIsNewest bool
	// The first key's tally (see heal.go) as the replies read so far left
	// it: a round trip planned now must find at least as much.
	tally int64
}

// fallback is how a process serves its calls while Redis fails, as its
// failure policy says (see fallback.go), guarded by the Throttler's mu.
// It owns Redis's health as the process sees it, and the local window
// (FallbackLocal's: nil under the other policies). Its policy's moves on
// the queue and on what the process owes Redis take the Throttler as an
// argument, as a rider's do; it keeps no pointer to it.
type fallback struct {
	degraded   time.Time // on the runtime's clock: until then, Redis is not tried (FailOpen, FallbackLocal)
	shareUntil time.Time // after FallbackLocal: admissions also keep to the local share until then
	// The client was closed (redis.ErrClosed): it will never answer, so
	// calls admitted without it are not kept to write back.
	closed bool
	local  *core.LocalWindow // FallbackLocal's in-process window, or nil
}

// isDegraded reports whether Redis is not to be tried yet after a failure.
// The deadline is on the runtime's clock (time.Now): a local clock
// (WithClock) that stepped back would otherwise keep Redis untried, and
// what the process owes it unwritten, for as long as the step.
func (f *fallback) isDegraded() bool { return time.Now().Before(f.degraded) }

// degradeLocked stops trying Redis for a while after it failed, under the
// FailOpen and FallbackLocal policies, and tells m when it was not
// degraded before.
func (f *fallback) degradeLocked(m *meter) {
	if f.degraded.IsZero() {
		m.degraded(true)
	}
	f.degraded = time.Now().Add(retryRedisAfter)
}

// recoveredLocked notes a successful round trip at now, and reports
// whether Redis was not tried before it (degraded). After FallbackLocal
// (a local window), other processes may still be admitting calls locally,
// and write them back only when they next try Redis (at most
// retryRedisAfter from now): until then Redis's counts miss them, and this
// process keeps to its share of the limit in the local window as well as
// to Redis's.
func (f *fallback) recoveredLocked(now time.Time) bool {
	if f.degraded.IsZero() {
		return false
	}
	f.degraded = time.Time{}
	if f.local != nil {
		f.shareUntil = now.Add(retryRedisAfter + 250*time.Millisecond)
	}
	return true
}
