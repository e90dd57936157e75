package throttler

import (
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// A round of capped calls wakes for a scan when the free slots it knows
// of leave room now past what the caps leave free on purpose (the spare,
// the light tenants' most, a unit a capped tenant and one more), and not
// otherwise (seed 56044).
func TestCapsLeaveRoom(t *testing.T) {
	_, c := miniClient(t)
	th := mustNew(t, c, "k", 100, time.Second, WithLogger(quiet))
	now := th.now()
	serverNow := th.clock.Server(now)
	slots := func(free, later int) []int64 {
		var s []int64
		for range free {
			s = append(s, serverNow-1000)
		}
		for i := range later {
			s = append(s, serverNow+int64(i+1)*1000)
		}
		return s
	}
	// A limit of 100 leaves a spare of 5 units; 2 capped tenants, the
	// light ones' most 10: 5+10+2+1 = 18 kept free on purpose.
	th.known.Tenants = core.TenantShares{Level: 40, Until: now.Add(time.Second), Capped: map[string]bool{"a": true, "b": true}, Light: 10}
	for _, c := range []struct {
		free, later int
		want        bool
	}{
		{0, 0, false},
		{0, 40, false},
		{18, 20, false},
		{19, 20, true},
		{40, 0, true},
	} {
		th.known.Slots = slots(c.free, c.later)
		if got := (tenantRider{}).capsLeaveRoom(th, now); got != c.want {
			t.Errorf("%d slots free now, %d later: capsLeaveRoom %v, want %v", c.free, c.later, got, c.want)
		}
	}
}

// scanWake has the rounds of capped calls sleep until the next scan is
// due while a tenant may have left; else until a satisfied tenant's
// newest call leaves the window, when a scan is due at once, or until the
// oldest call of a capped tenant queued elsewhere leaves it (and no sooner
// than the next scan is due); else as they would.
func TestScanWake(t *testing.T) {
	_, c := miniClient(t)
	th := mustNew(t, c, "k", 100, time.Second, WithLogger(quiet))
	now := th.now()
	serverNow := th.clock.Server(now)
	every := th.scanEvery()
	th.upkeep.scan = now
	th.known.Tenants = core.TenantShares{Level: 40, Until: now.Add(time.Second), Capped: map[string]bool{"a": true}}
	if _, ok := (tenantRider{}).scanWake(th, now, false); ok {
		t.Errorf("scanWake wakes with no tenant that may have left, none asking for less")
	}
	th.known.Tenants.Leaves = serverNow + 500_000
	if d, ok := (tenantRider{}).scanWake(th, now, false); !ok || d != 500*time.Millisecond {
		t.Errorf("scanWake = %s, %v; want 500ms, when the satisfied tenant's newest call leaves", d, ok)
	}
	if th.upkeep.scanDue(now, (tenantRider{}).scanGap(th, now)) || !th.upkeep.scanDue(now.Add(500*time.Millisecond), (tenantRider{}).scanGap(th, now.Add(500*time.Millisecond))) {
		t.Errorf("a scan is due before the satisfied tenant's newest call leaves, or not as it leaves")
	}
	th.known.Tenants.Leaves = 0
	th.known.Tenants.Drops = serverNow + 300_000
	if d, ok := (tenantRider{}).scanWake(th, now, false); !ok || d != 300*time.Millisecond {
		t.Errorf("scanWake = %s, %v; want 300ms, when the oldest call of a capped tenant queued elsewhere leaves the window", d, ok)
	}
	th.known.Tenants.Drops = serverNow + 1_000
	if d, ok := (tenantRider{}).scanWake(th, now, false); !ok || d != every {
		t.Errorf("scanWake = %s, %v; want %s, the next scan's time, which comes after that call leaves", d, ok, every)
	}
	th.known.Tenants.Drops = 0
	th.known.Tenants.Fair.Short = map[string]int{"b": 3}
	if d, ok := (tenantRider{}).scanWake(th, now, false); !ok || d != every/4 {
		t.Errorf("scanWake = %s, %v; want %s with a tenant short of its share: the second scan comes sooner", d, ok, every/4)
	}
}
