package throttler

import (
	"strings"
	"sync"
	"time"
)

// Per-tenant counts for Stats (Stats.Tenants). The waits admitted for a
// tenant (see ContextWithTenant) are counted in a table of at most
// maxTenantStats entries, in the order of their tenants' last admissions;
// the tenants without an entry are counted together (TenantStats.Other).
// A tenant that has no entry takes the place of the least recently active
// one, but only once a snapshot (Stats) has been taken since that one's
// last admission: an entry leaves only after a snapshot has shown its last
// counts, which it then adds to Other. A snapshot also lets go of the
// tenants with no wait admitted for longer than the table's idle time (the
// Throttler's longest window) once it has shown them: an idle tenant
// costs nothing here after a window, as in Redis. A wait without a tenant
// never reaches the table (see meter.wait).

// maxTenantStats is how many tenants Stats counts apart (see TenantStats).
const maxTenantStats = 100

// TenantStats count the waits (see Stats) admitted for the calls of
// tenants (see ContextWithTenant), by tenant. A wait without a tenant, or
// whose tenant is "" (the calls without a tenant, in the process's fair
// order), counts in Stats only, and so does an AllowN call, which takes no
// part in the tenants' order or shares.
//
// At most 100 tenants have their own counts in ByTenant, so that a
// process serving many tenants keeps a bounded table: the waits of the
// others count in Other. When a tenant's wait is admitted and the table is
// full, the tenant takes the place of the one whose last wait was admitted
// the longest ago, provided a Stats snapshot has been taken since then
// (the one leaving has had its last counts shown); otherwise it counts in
// Other. A tenant none of whose waits was admitted for longer than the
// Throttler's longest window leaves too, once a snapshot has shown it: an
// idle tenant costs nothing after a window. The leaving tenant's counts
// move to Other, and start again from zero if it comes back, with a later
// Since. So each of a tenant's counts only grows while its Since stays
// the same, and Other's counts, and the sums over ByTenant and Other, only
// grow. A tenant that left and came back between two snapshots shows in
// both, its counts started again between them: its Since tells, as the
// created time of an OpenMetrics counter does (a reader that keeps
// counters adds the new counts to what it had, rather than taking their
// drop for a reset it missed). Such a reader sees every admission only if
// it is the one caller of Stats: a snapshot taken by another (the
// throttlerotel module's collections take one each) may show a tenant's
// last counts and let it go unseen by this reader. The sums over
// ByTenant and Other are right whatever the interval.
type TenantStats struct {
	// ByTenant holds the counts of the tenants that have their own, by
	// tenant; nil when no tenant has any.
	ByTenant map[string]TenantCounts
	// Other sums the counts of the tenants not in ByTenant: those that
	// found the table full, and those that left it.
	Other TenantCounts
}

// TenantCounts count the waits admitted for one tenant's calls (or
// several's: TenantStats.Other) as Stats counts every wait's.
type TenantCounts struct {
	// Admitted is how many units those waits were admitted (a WaitN of n
	// counts n, an Acquire its estimate).
	Admitted uint64
	// Waits is how many of them were admitted.
	Waits uint64
	// Waited is the total time they took, from the call to its return:
	// divided by Waits, it is the tenant's mean wait.
	Waited time.Duration
	// Since is when these counts began, on the Throttler's clock: in
	// ByTenant, when the first wait they count was admitted (the tenant
	// took its place in the table then); a tenant that leaves the table
	// and comes back starts new counts, with a later Since (if that clock
	// advanced: see WithClock). Zero in Other, which counts from the
	// Throttler's start. Compare it with Time.Equal.
	Since time.Time
}

// add counts one wait admitted n units after waited.
func (c *TenantCounts) add(n int, waited time.Duration) {
	c.Admitted += uint64(n)
	c.Waits++
	c.Waited += waited
}

// merge adds what d counts to c, whose Since stays.
func (c *TenantCounts) merge(d TenantCounts) {
	c.Admitted += d.Admitted
	c.Waits += d.Waits
	c.Waited += d.Waited
}

// tenantTable counts the waits admitted by tenant for Stats, under its own
// mutex, which only the waits of tenants and Stats take.
type tenantTable struct {
	mu      sync.Mutex
	entries map[string]*tenantEntry // nil until a tenant's wait is admitted
	// ring links the entries, most recently admitted first: ring.next is
	// the most recent, ring.prev the least.
	ring  tenantEntry
	other TenantCounts
	snaps uint64 // snapshots taken
	// idle is how long after its last admission a tenant's entry leaves
	// at the next snapshot (0: only to make room); set before use.
	idle time.Duration
}

// tenantEntry is one tenant's counts, linked in its table's ring.
type tenantEntry struct {
	tenant     string
	counts     TenantCounts
	snaps      uint64    // the table's snaps at its last admission
	last       time.Time // its last admission, on the Throttler's clock
	prev, next *tenantEntry
}

// admitted counts a wait of n units admitted for tenant (not "") after
// waited, at now.
func (tt *tenantTable) admitted(tenant string, n int, waited time.Duration, now time.Time) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	e := tt.entries[tenant]
	if e == nil {
		if e = tt.place(tenant); e == nil {
			tt.other.add(n, waited)
			return
		}
		e.counts.Since = now
	} else {
		e.unlink()
	}
	e.counts.add(n, waited)
	e.snaps, e.last = tt.snaps, now
	e.prev, e.next = &tt.ring, tt.ring.next
	e.prev.next, e.next.prev = e, e
}

// place returns a new entry, unlinked, for tenant, in the table's free
// room or in place of the least recently admitted entry if a snapshot has
// been taken since its last admission; nil when neither is free.
func (tt *tenantTable) place(tenant string) *tenantEntry {
	if tt.entries == nil {
		tt.entries = make(map[string]*tenantEntry)
		tt.ring.prev, tt.ring.next = &tt.ring, &tt.ring
	}
	e := new(tenantEntry)
	if len(tt.entries) >= maxTenantStats {
		if e = tt.ring.prev; e.snaps == tt.snaps {
			return nil
		}
		tt.remove(e)
	}
	// A tenant named by a slice of a larger string (a header, a path)
	// must not keep that string alive.
	*e = tenantEntry{tenant: strings.Clone(tenant)}
	tt.entries[e.tenant] = e
	return e
}

// remove takes e out of the table, its counts to Other.
func (tt *tenantTable) remove(e *tenantEntry) {
	e.unlink()
	delete(tt.entries, e.tenant)
	tt.other.merge(e.counts)
}

// unlink takes e out of its ring.
func (e *tenantEntry) unlink() {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

// snapshot returns the table's counts at now, lets the entries it shows
// give way to new tenants (see place), and lets go of those idle for
// longer than tt.idle.
func (tt *tenantTable) snapshot(now time.Time) TenantStats {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	s := TenantStats{Other: tt.other}
	if len(tt.entries) > 0 {
		s.ByTenant = make(map[string]TenantCounts, len(tt.entries))
		for tenant, e := range tt.entries {
			s.ByTenant[tenant] = e.counts
		}
	}
	tt.snaps++
	for e := tt.ring.prev; tt.idle > 0 && e != nil && e != &tt.ring && now.Sub(e.last) > tt.idle; e = tt.ring.prev {
		tt.remove(e)
	}
	return s
}
