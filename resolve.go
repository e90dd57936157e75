package throttler

import (
	"slices"

	"github.com/go-throttler/throttler/internal/core"
)

// Resolving a reply is a pure function too: resolve takes the attempt, the
// reply and what the Throttler learned from it (the limits and pause in
// force, whether the counts can be trusted), and returns which claims are
// admitted and what the next round should know. The worker applies it.

// resolveIn is what a reply is resolved with.
type resolveIn struct {
	a          *core.Attempt
	r          core.Reply
	claims     []claim
	leaving    []bool // per claim: its caller left while it was in flight
	lims       []int  // the limits in force, as the reply told them
	pausedTill int64  // server µs, as the reply told it
	arrived    int64  // server µs: the server's now as the reply is applied
	// The counts prove nothing: scored with a clock estimate a step made
	// wrong, or Redis lost the window (see health.noticeLoss).
	distrust bool
	// The largest margin in force as the reply read it (µs; see
	// margin.go).
	wide int64
}

// resolveOut is a resolved reply.
type resolveOut struct {
	ok        []bool // per claim: admitted
	immediate []bool // per claim admitted: it goes now, without a timer
	remaining []int  // per claim: room left under the tightest limit
	near      bool   // little room left: the next round reserves exactly (only said by a round that claimed something)
	slots     []int64
	capped    [core.Levels][]int64 // by level: the slots of the priorities below the highest's share it learned (see known)
}

// resolve decides the claims of a reply. A claim is admitted when it fits
// under every limit (see decide), its slot is not inside a shared pause,
// and the counts can be trusted. The slices of buf (the last round's
// outcome) are reused.
func resolve(c *config, in resolveIn, buf resolveOut) resolveOut {
	a, r := in.a, in.r
	out := resolveOut{ok: decide(c, a, in.lims, r, in.claims, buf.ok)}
	// A margin another process published while this attempt was on its
	// way, larger than the one the counts were taken with: they may have
	// missed its calls (see margin.go).
	narrow := in.wide > a.Margin.Used
	for i, cl := range in.claims {
		// A pause another process set while this attempt was on its way.
		if cl.score < in.pausedTill || in.distrust || narrow {
			out.ok[i] = false
		}
	}
	if len(in.claims) > 0 {
		// A round that claimed nothing says nothing about room.
		out.near = slices.Contains(out.ok, false)
		for wi, counts := range r.Counts {
			room := int64(c.smallestCap(a.Learn.PrioMask, in.lims[wi]))
			for _, n := range counts {
				out.near = out.near || n+int64(c.batchUnits()) > room
			}
		}
	}
	out.immediate = slices.Grow(buf.immediate[:0], len(in.claims))[:len(in.claims)]
	out.remaining = slices.Grow(buf.remaining[:0], len(in.claims))[:len(in.claims)]
	for i, cl := range in.claims {
		// Scored for when the reply arrives, which is now: a timer for
		// the microseconds left would only add its own latency. Unless
		// the reply came back much sooner than the round trip it was
		// planned with (an estimate taken during a stall): then the
		// call would go early by the difference. Early by up to its
		// early tolerance, and late by up to its allowance (see
		// await), keeps two calls a limit apart an interval apart.
		out.immediate[i] = cl.score <= a.Soonest && cl.score <= in.arrived+c.earlyTolerance()
		out.remaining[i] = remaining(c, a, in.lims, r, cl, out.ok[i])
	}
	if a.Learn.Slots > 0 {
		var dropped []core.Entry
		for i, cl := range in.claims {
			if !out.ok[i] || in.leaving[i] {
				dropped = append(dropped, a.Adds[cl.first:cl.first+cl.n]...)
			}
		}
		out.slots = upcoming(c.wins, r.Tails, a.Lims, a, dropped, in.arrived+core.FutureBound)
		for l, caps := range a.Learn.LowCaps {
			if len(caps) > 0 {
				out.capped[l] = upcoming(c.wins, r.LowTails[l], caps, a, dropped, in.arrived+core.FutureBound)
			}
		}
	}
	return out
}

// remaining is the room claim cl's counts left under the tightest limit.
func remaining(c *config, a *core.Attempt, lims []int, r core.Reply, cl claim, ok bool) int {
	i, _ := slices.BinarySearch(a.Checks, cl.score)
	left := c.wins[0].Limit
	for wi, counts := range r.Counts {
		if i >= len(counts) {
			continue
		}
		room := lims[wi] - int(counts[i])
		if !ok {
			room += cl.n // counted, but given back
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
func decide(c *config, a *core.Attempt, lims []int, r core.Reply, claims []claim, ok []bool) []bool {
	wins := c.wins
	peaks := func(wi int) []int64 {
		if r.Peaks == nil {
			return nil
		}
		return r.Peaks[wi]
	}
	ok = admit(claims, a.Checks, r.Counts[0], peaks(0), c.caps(lims[0]), wins[0].W+a.Margin.Widen, ok)
	for wi := 1; wi < len(wins); wi++ {
		more := admit(claims, a.Checks, r.Counts[wi], peaks(wi), c.caps(lims[wi]), wins[wi].W+a.Margin.Widen, nil)
		for i := range ok {
			ok[i] = ok[i] && more[i]
		}
	}
	return ok
}

// upcoming returns the next free slots under the limits lims (the limits
// in force, or a priority's caps under them: see lowCaps), read from the
// tails fetched for them: for j = 0..k-1, the earliest score at which j+1
// members could be added at once under every limit, the latest of each
// limit's (see nextSlots). Members scored after limit (server µs) are
// garbage, not calls.
func upcoming(wins []core.Window, tails [][]core.Entry, lims []int, a *core.Attempt, dropped []core.Entry, limit int64) []int64 {
	var slots []int64
	for wi, x := range wins {
		s := nextSlots(sane(tails[wi], limit), dropped, lims[wi], min(a.Learn.Slots, lims[wi]), len(a.Adds), x.W+a.Margin.Widen)
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
