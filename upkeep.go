package throttler

import (
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// upkeep is when each kind of upkeep last rode on a round trip that
// reached Redis, guarded by the Throttler's mu. Upkeep is due until a round
// trip that carried it succeeds (see done): a round that sends nothing, or
// fails, must not put off the next PEXPIRE, or the key could expire under
// live members.
type upkeep struct {
	trim, clock, expire time.Time
	scan                time.Time // the tenants' calls counted (see tenants.go)
	scanLeft            bool      // a round left its due scan to the next (see tenantRider.claim)
	round               time.Time // the last round trip that reached Redis
	widen               int64     // how much wider the last round trip counted (µs; see internal/core's margin.go)
}

// due sets what attempt a planned at now carries: a trim, a clock sample
// and a TTL refresh, each when its time has come (a rider may ask for the
// refresh too: see lossRider).
func (u *upkeep) due(a *core.Attempt, c *config, now time.Time, clockSynced, monotonic bool) {
	a.Trim.On = now.Sub(u.trim) >= c.trimEvery()
	a.Clock = now.Sub(u.clock) >= clockEvery || !clockSynced || !monotonic
	a.Expire.On = now.Sub(u.expire) >= expireEvery
}

// done notes the upkeep attempt a, planned at now, carried, once its round
// trip succeeded, and that a round trip reached Redis then.
func (u *upkeep) done(a *core.Attempt, now time.Time) {
	u.round = now
	u.widen = marginWiden(a)
	if a.Trim.On {
		u.trim = now
	}
	if a.Clock {
		u.clock = now
	}
	if a.Expire.On {
		u.expire = now
	}
	if tenantsScanned(a) {
		u.scan, u.scanLeft = now, false
	}
}

// leaveScan has a round leave its due scan to the next one (see
// tenantRider.claim), and reports whether it may: not when the round
// before left it already.
func (u *upkeep) leaveScan() bool {
	if u.scanLeft {
		return false
	}
	u.scanLeft = true
	return true
}

// scanDue reports whether the tenants' calls were last counted at least
// every ago, at now.
func (u *upkeep) scanDue(now time.Time, every time.Duration) bool {
	return now.Sub(u.scan) >= every
}

// Upkeep that need not ride on every round trip.
const (
	// Trims of expired members ride along at most this often, or every
	// twentieth of the shortest window if longer (see trimEvery).
	minTrimEvery = 100 * time.Millisecond
	// A local clock without monotonic readings is sampled every round
	// trip instead (see core.Clock).
	clockEvery = 250 * time.Millisecond
	// The key's TTL outlives its newest member by 2s (see core.Rules.TTL), so a
	// refresh a second late still keeps every member that counts.
	expireEvery = time.Second
)

// trimEvery is how often a process trims what stopped counting: every
// 100ms, or every twentieth of the shortest window if longer. Counts and
// slot lookups read only a window's neighbourhood, so members past it cost
// memory, not correctness: a set holds at most a twentieth of a window of
// them more than a trim on every round trip would leave, and an hour-long
// window's process, probing every 36s, trims each key (redisstore's
// TrimScript) every 3 minutes instead of with every probe. A compacted window
// compacts with each trim, and trims at least every half of its age, so
// that it keeps a member for at most one and a half ages of calls.
func (c *config) trimEvery() time.Duration {
	w := c.rules.Wins[0].W / 20
	for _, x := range c.rules.Wins {
		w = min(w, x.W/20)
		if x.Bucket > 0 {
			w = min(w, x.Age/2)
		}
	}
	return max(minTrimEvery, time.Duration(w)*time.Microsecond)
}
