package throttler

import "time"

// health is Redis's health as this process sees it, guarded by the
// Throttler's mu: whether calls follow the failure policy instead of Redis
// (see fallback.go), and what lets a round trip tell that Redis lost the
// window (see heal.go).
type health struct {
	degraded   time.Time // while now is before it, Redis is not tried (FailOpen, FallbackLocal)
	shareUntil time.Time // after FallbackLocal: admissions also keep to the local share until then
	lastSeen   int64     // server µs: the last round trip that found (or wrote) the marker (0 = none)
	journal    journal   // our admissions that still count: the probe for a lost window
	// The client was closed (redis.ErrClosed): it will never answer, so
	// calls admitted without it are not kept to write back.
	closed bool
}
