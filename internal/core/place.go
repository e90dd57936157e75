package core

import "slices"

// A store may place the claims of an attempt itself (see Placement): what
// the core does with the scores it placed them at.

// InStore reports whether the round trip wrote claim i's members: always,
// unless the store placed the claims (Placed) and found no room for this
// one, or answered nothing for it.
func (r RiderReply) InStore(i int) bool {
	return r.Placed == nil || (i < len(r.Placed) && r.Placed[i] > 0)
}

// decidePlaced is decide over the claims whose members are in the store
// (see RiderReply.InStore); the others are not admitted, and count for no check.
func decidePlaced(c *Rules, a *Attempt, lims []int, r Reply, claims []Claim, ok []bool) []bool {
	if !r.PlacedByStore() {
		return decide(c, a, lims, r, claims, ok)
	}
	var in []Claim
	for i, cl := range claims {
		if r.InStore(i) {
			in = append(in, cl)
		}
	}
	kept := decide(c, a, lims, r, in, nil)
	ok = slices.Grow(ok[:0], len(claims))[:len(claims)]
	j := 0
	for i := range claims {
		ok[i] = false
		if r.InStore(i) {
			ok[i] = kept[j]
			j++
		}
	}
	return ok
}

// SetPlaced moves the members of the claims the store placed to their
// scores (placed: per claim, its score, 0 when it was not placed) and
// makes Checks the distinct scores of the placed claims, as a store
// reports its counts: the attempt then reads as if it had added them
// there, and the members of claims not placed are in no check.
func (a *Attempt) SetPlaced(placed []int64) {
	a.Checks = a.Checks[:0]
	for i, c := range a.Claims {
		if i >= len(placed) || placed[i] <= 0 {
			continue
		}
		for j := c.First; j < c.First+c.N; j++ {
			a.Adds[j].Score = placed[i]
		}
		a.Checks = addCheck(a.Checks, placed[i])
	}
}

// PlaceClaims gives each claim the store placed its score (see
// Attempt.Place); those not placed keep theirs, and have no member in the
// store.
func PlaceClaims(claims []Claim, r Reply) {
	for i, g := range r.Placed {
		if i < len(claims) && g > 0 {
			claims[i].Score = g
		}
	}
}

// PlacedByStore reports whether the store placed the attempt's claims.
func (r RiderReply) PlacedByStore() bool { return r.Placed != nil }

// Next returns the riders of the next attempt: none, on the buffers of
// these.
func (r Riders) Next() Riders {
	return Riders{Placement: Placement{Caps: r.Caps, Claims: r.Claims[:0]}}
}

// resent notes that the attempt is sent again (see Attempt.Resent): the
// store keeps the scores of the claims its first application placed.
func (r *Riders) resent() { r.Again = true }
