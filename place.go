package throttler

import "github.com/go-throttler/throttler/internal/core"

// Near the limit, a process whose round trip is longer than the window
// takes to free a slot lets Redis place its claims (see core.Placement and
// the redisstore package's place.go): what follows is the Throttler's side.

// placeRider lets Redis place the round's claims, and gives the claims the
// scores it placed them at.
type placeRider struct{ noRider }

// claim lets the store place the claims of plan p itself near the limit
// (see core.Attempt.Place), where it finds room when it applies them, when
// the free slots the plan worked from, a round trip old, are stale by then
// (see core.Rules.StaleSlots).
func (placeRider) claim(t *Throttler, rd *round) {
	a, p := rd.Attempt, rd.Plan
	a.Place = p.Exact && len(p.Claims) > 0 && t.rules.StaleSlots(t.clock.View().RTT)
	if !a.Place {
		return
	}
	// A copy: the plan's buffers are the next round's, while a round trip
	// that timed out may still be reading this attempt (see round).
	a.Claims = append(a.Claims, p.Claims...)
	for l := range a.Caps {
		a.Caps[l] = a.Caps[l][:0]
	}
	for _, lim := range a.Lims {
		caps := t.rules.Caps(lim)
		for l := range a.Caps {
			a.Caps[l] = append(a.Caps[l], caps[l])
		}
	}
}

func (placeRider) read(_ *Throttler, rd *round, _ *replyRead) {
	core.PlaceClaims(rd.Plan.Claims, rd.Reply)
}
