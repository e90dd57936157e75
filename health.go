package throttler

import "time"

// health is Redis's health as this process sees it, guarded by the
// Throttler's mu: whether calls follow the failure policy instead of Redis
// (see fallback.go), and what lets a round trip tell that Redis lost the
// window (see heal.go).
type health struct {
	degraded   time.Time // on the runtime's clock: until then, Redis is not tried (FailOpen, FallbackLocal)
	shareUntil time.Time // after FallbackLocal: admissions also keep to the local share until then
	lastSeen   int64     // server µs: the last round trip that found (or wrote) the marker (0 = none)
	journal    journal   // our admissions that still count: the probe for a lost window
	// The client was closed (redis.ErrClosed): it will never answer, so
	// calls admitted without it are not kept to write back.
	closed bool
}

// isDegraded reports whether Redis is not to be tried yet after a failure.
// The deadline is on the runtime's clock (time.Now): a local clock
// (WithClock) that stepped back would otherwise keep Redis untried, and
// what the process owes it unwritten, for as long as the step.
func (h *health) isDegraded() bool { return time.Now().Before(h.degraded) }
