package throttler

import "github.com/go-throttler/throttler/internal/core"

// The optional mechanisms that ride on the round trip plug into the round
// as riders: the round calls every rider at the same points, in the order
// of roundRiders, and names none of them. A rider's part of the attempt
// and of the reply (core.Riders, core.RiderReply) is its own: only its
// files touch it, which internal/coresize's riders.go checks. Places in
// flight (inflight.go) are the exception still: their asks and grants go
// waiter by waiter, through the queue's own hooks.

// A rider adds its part to the round's attempt and reads its part of the
// reply. Its methods run with t.mu held.
type rider interface {
	// ask adds the rider's part to attempt a before the plan is made, and
	// tells the plan (in) what it needs to know of it.
	ask(t *Throttler, a *core.Attempt, in *core.PlanIn)
	// claim adds to a what follows from plan p.
	claim(t *Throttler, a *core.Attempt, p core.PlanOut)
	// read reads the rider's part of round rd's reply as it arrives,
	// into what the round resolves it with (rr).
	read(t *Throttler, rd *round, rr *replyRead)
	// holds reports whether a must be sent for the rider's sake though it
	// claims and gives back nothing.
	holds(a *core.Attempt) bool
	// unsent notes that a was not sent, or may not have arrived.
	unsent(t *Throttler, a *core.Attempt)
}

// riders are the riders of a round, in the order they are asked.
type riders []rider

// roundRiders are the riders of every round: the loss checks first (a
// heal's pause, read first, distrusts the rest).
var roundRiders = riders{lossRider{}, marginRider{}, placeRider{}, announceRider{}}

// replyRead is what a reply is resolved with, as the riders read it.
type replyRead struct {
	arrived  int64 // the server's now as the reply arrived, by the estimate (µs)
	errBound int64 // the estimate's error bound then (µs)
	serverAt int64 // the server's now as the reply read it, when it did (else arrived)
	lost     bool  // Redis lost the window: the counts decide nothing
	wide     int64 // the largest margin in force, as the reply read it (µs)
}

// noRider adds nothing where a rider has nothing to add.
type noRider struct{}

func (noRider) ask(*Throttler, *core.Attempt, *core.PlanIn)   {}
func (noRider) claim(*Throttler, *core.Attempt, core.PlanOut) {}
func (noRider) read(*Throttler, *round, *replyRead)           {}
func (noRider) holds(*core.Attempt) bool                      { return false }
func (noRider) unsent(*Throttler, *core.Attempt)              {}

// hold reports whether a rider of rs needs attempt a sent.
func (rs riders) hold(a *core.Attempt) bool {
	for _, r := range rs {
		if r.holds(a) {
			return true
		}
	}
	return false
}

// unsent tells every rider of rs that attempt a was not sent, or may not
// have arrived.
func (rs riders) unsent(t *Throttler, a *core.Attempt) {
	for _, r := range rs {
		r.unsent(t, a)
	}
}
