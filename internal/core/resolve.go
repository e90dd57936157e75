package core

import (
	"slices"
)

// Resolving a reply is a pure function too: Resolve takes the attempt, the
// reply and what the Throttler learned from it (the limits and pause in
// force, whether the counts can be trusted), and returns which claims are
// admitted and what the next round should know. The throttler's worker
// applies it.

// ResolveIn is what a reply is resolved with.
type ResolveIn struct {
	A          *Attempt
	R          Reply
	Claims     []Claim
	Leaving    []bool // per claim: its caller left while it was in flight
	Lims       []int  // the limits in force, as the reply told them
	PausedTill int64  // server µs, as the reply told it
	Arrived    int64  // server µs: the server's now as the reply is applied
	// The counts prove nothing: scored with a clock estimate a step made
	// wrong, or Redis lost the window (see the throttler's
	// health.noticeLoss).
	Distrust bool
	// The largest margin in force as the reply read it (µs; see
	// margin.go).
	Wide int64
	// Per claim (nil: none): a rider refuses it, a capped tenant's
	// claim that its cap does not hold (see tenants.go).
	Refused []bool
}

// ResolveOut is a resolved reply.
type ResolveOut struct {
	OK        []bool // per claim: admitted
	Immediate []bool // per claim admitted: it goes now, without a timer
	Remaining []int  // per claim: room left under the tightest limit
	Near      bool   // little room left: the next round reserves exactly (only said by a round that claimed something)
	Slots     []int64
	Capped    [Levels][]int64 // by level: the slots of the priorities below the highest's share it learned (see Known)
}

// Resolve decides the claims of a reply. A claim is admitted when it fits
// under every limit (see decide), its slot is not inside a shared pause,
// and the counts can be trusted; when the store placed the claims (see
// Attempt.Place), in.Claims hold their placed scores (see PlaceClaims),
// and a claim it did not place is not admitted. The slices of buf (the
// last round's outcome) are reused.
func Resolve(c *Rules, in ResolveIn, buf ResolveOut) ResolveOut {
	a, r := in.A, in.R
	out := ResolveOut{OK: decidePlaced(c, a, in.Lims, r, in.Claims, buf.OK)}
	// A margin another process published while this attempt was on its
	// way, larger than the one the counts were taken with: they may have
	// missed its calls (see margin.go).
	narrow := in.Wide > a.marginUsed()
	for i, cl := range in.Claims {
		// A pause another process set while this attempt was on its way.
		if cl.Score < in.PausedTill || in.Distrust || narrow || (in.Refused != nil && in.Refused[i]) {
			out.OK[i] = false
		}
	}
	if len(in.Claims) > 0 {
		// A round that claimed nothing says nothing about room.
		out.Near = slices.Contains(out.OK, false)
		for wi, counts := range r.Counts {
			room := int64(c.SmallestCap(a.Learn.PrioMask, in.Lims[wi]))
			for _, n := range counts {
				out.Near = out.Near || n+int64(c.BatchUnits()) > room
			}
		}
	}
	out.Immediate = slices.Grow(buf.Immediate[:0], len(in.Claims))[:len(in.Claims)]
	out.Remaining = slices.Grow(buf.Remaining[:0], len(in.Claims))[:len(in.Claims)]
	for i, cl := range in.Claims {
		// Scored for when the reply arrives, which is now: a timer for
		// the microseconds left would only add its own latency. Unless
		// the reply came back much sooner than the round trip it was
		// planned with (an estimate taken during a stall): then the
		// call would go early by the difference. Early by up to its
		// early tolerance, and late by up to its allowance (see the
		// throttler's await), keeps two calls a limit apart an interval
		// apart.
		if !r.InStore(i) {
			out.Immediate[i], out.Remaining[i] = false, 0
			continue
		}
		out.Immediate[i] = cl.Score <= a.Soonest && cl.Score <= in.Arrived+c.EarlyTolerance()
		out.Remaining[i] = remaining(c, a, in.Lims, r, cl, out.OK[i])
	}
	if a.Learn.Slots > 0 {
		var dropped []Entry
		for i, cl := range in.Claims {
			if r.InStore(i) && (!out.OK[i] || in.Leaving[i]) {
				dropped = append(dropped, a.Adds[cl.First:cl.First+cl.N]...)
			}
		}
		out.Slots = upcoming(c.Wins, r.Tails, a.Lims, a, dropped, in.Arrived+FutureBound)
		for l, caps := range a.Learn.LowCaps {
			if len(caps) > 0 {
				out.Capped[l] = upcoming(c.Wins, r.LowTails[l], caps, a, dropped, in.Arrived+FutureBound)
			}
		}
	}
	return out
}

// remaining is the room claim cl's counts left under the tightest limit.
func remaining(c *Rules, a *Attempt, lims []int, r Reply, cl Claim, ok bool) int {
	i, _ := slices.BinarySearch(a.Checks, cl.Score)
	left := c.Wins[0].Limit
	for wi, counts := range r.Counts {
		if i >= len(counts) {
			continue
		}
		room := lims[wi] - int(counts[i])
		if !ok {
			room += cl.N // counted, but given back
		}
		left = min(left, max(0, room))
	}
	return left
}

// decide returns which claims of the attempt fit under every limit, given
// the limits in force (as the reply told them: the counts are exact under
// whichever limit holds, so the newest word on the limit is the one to
// use). Each limit keeps claims greedily on its own (see admit); a claim is
// admitted only when all keep it. A claim one limit would have kept but
// another refused still counts against the first's later claims in this
// attempt, which can only refuse more, never admit more.
func decide(c *Rules, a *Attempt, lims []int, r Reply, claims []Claim, ok []bool) []bool {
	wins := c.Wins
	peaks := func(wi int) []int64 {
		if r.Peaks == nil {
			return nil
		}
		return r.Peaks[wi]
	}
	ok = admit(claims, a.Checks, r.Counts[0], peaks(0), c.Caps(lims[0]), a.Reach(wins[0]), ok)
	for wi := 1; wi < len(wins); wi++ {
		more := admit(claims, a.Checks, r.Counts[wi], peaks(wi), c.Caps(lims[wi]), a.Reach(wins[wi]), nil)
		for i := range ok {
			ok[i] = ok[i] && more[i]
		}
	}
	return ok
}

// upcoming returns the next free slots under the limits lims (the limits
// in force, or a priority's caps under them: see Rules.LowCaps), read from
// the tails fetched for them: for j = 0..k-1, the earliest score at which
// j+1 members could be added at once under every limit, the latest of each
// limit's (see nextSlots). Members scored after limit (server µs) are
// garbage, not calls.
func upcoming(wins []Window, tails [][]Entry, lims []int, a *Attempt, dropped []Entry, limit int64) []int64 {
	var slots []int64
	for wi, x := range wins {
		s := nextSlots(Sane(tails[wi], limit), dropped, lims[wi], min(a.Learn.Slots, lims[wi]), len(a.Adds), a.Reach(x))
		if wi == 0 {
			slots = s
			continue
		}
		slots = slots[:min(len(slots), len(s))]
		for j := range slots {
			slots[j] = max(slots[j], s[j])
		}
	}
	return slots
}
