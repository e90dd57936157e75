package throttler

import "github.com/go-throttler/throttler/internal/core"

// The optional mechanisms that ride on the round trip plug into the round
// as riders: the round calls every rider at the same points, in the order
// of roundRiders, and names none of them. A rider's part of the attempt
// and of the reply (core.Riders, core.RiderReply) is its own: only its
// files touch it, which internal/coresize's riders.go checks. A rider may
// also give each call what it needs besides its slot, as places in flight
// do (inflight.go): the round then asks the riders whether a call lacks
// it, and has them hold it aside.

// A rider adds its part to the round's attempt and reads its part of the
// reply. Its methods run with t.mu held.
type rider interface {
	// ask adds the rider's part to attempt a before the plan is made, and
	// tells the plan (in) what it needs to know of it.
	ask(t *Throttler, a *core.Attempt, in *core.PlanIn)
	// claim adds to round rd's attempt what follows from its plan, once
	// the plan has taken its batch of waiters from the queue, and may
	// shorten the round's sleep (rd.sleep) when it claims nothing.
	claim(t *Throttler, rd *round)
	// read reads the rider's part of round rd's reply as it arrives,
	// into what the round resolves it with (rr).
	read(t *Throttler, rd *round, rr *replyRead)
	// holds reports whether a must be sent for the rider's sake though it
	// claims and gives back nothing.
	holds(a *core.Attempt) bool
	// unsent notes that a was not sent, or may not have arrived.
	unsent(t *Throttler, a *core.Attempt)

	// A rider may also give each call something it needs to go besides
	// its slot (a place in flight):
	//
	// enter reports whether w, joining the queue, waits aside for it
	// instead (see aside).
	enter(t *Throttler, w *waiter) (aside bool)
	// lacks reports whether w, admitted a slot, still lacks it, and may
	// not go: its slot goes back.
	lacks(w *waiter) bool
	// aside keeps w, which lacked it after round trip a, aside until it
	// may have it, and reports whether w goes back to the queue at once
	// instead.
	aside(t *Throttler, w *waiter, a *core.Attempt) (requeue bool)
	// drop gives back what the rider gave w, whose caller is gone.
	drop(t *Throttler, w *waiter)
}

// riders are the riders of a round, in the order they are asked.
type riders []rider

// roundRiders are the riders of every round: the loss checks first (a
// heal's pause, read first, distrusts the rest).
var roundRiders = riders{lossRider{}, marginRider{}, placeRider{}, announceRider{}, inFlightRider{}, tenantRider{}}

// replyRead is what a reply is resolved with, as the riders read it.
type replyRead struct {
	arrived  int64  // the server's now as the reply arrived, by the estimate (µs)
	errBound int64  // the estimate's error bound then (µs)
	serverAt int64  // the server's now as the reply read it, when it did (else arrived)
	lost     bool   // Redis lost the window: the counts decide nothing
	wide     int64  // the largest margin in force, as the reply read it (µs)
	refused  []bool // per claim (nil: none): a rider refuses it (see core.ResolveIn)
	gone     []bool // per claim (nil: none): its members left the store with the round trip
	replan   bool   // a rider read what lets queued calls go sooner: the next round goes at once
}

// noRider adds nothing where a rider has nothing to add.
type noRider struct{}

func (noRider) ask(*Throttler, *core.Attempt, *core.PlanIn)   {}
func (noRider) claim(*Throttler, *round)                      {}
func (noRider) read(*Throttler, *round, *replyRead)           {}
func (noRider) holds(*core.Attempt) bool                      { return false }
func (noRider) unsent(*Throttler, *core.Attempt)              {}
func (noRider) enter(*Throttler, *waiter) bool                { return false }
func (noRider) lacks(*waiter) bool                            { return false }
func (noRider) aside(*Throttler, *waiter, *core.Attempt) bool { return true }
func (noRider) drop(*Throttler, *waiter)                      {}

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

// enter reports whether a rider of rs has w, joining the queue, wait aside.
func (rs riders) enter(t *Throttler, w *waiter) bool {
	for _, r := range rs {
		if r.enter(t, w) {
			return true
		}
	}
	return false
}

// lack reports whether w, admitted a slot, lacks what a rider of rs gives.
func (rs riders) lack(w *waiter) bool {
	for _, r := range rs {
		if r.lacks(w) {
			return true
		}
	}
	return false
}

// aside has the first rider of rs whose gift w lacks keep it aside (see
// rider.aside), and reports whether w goes back to the queue at once.
func (rs riders) aside(t *Throttler, w *waiter, a *core.Attempt) (requeue bool) {
	for _, r := range rs {
		if r.lacks(w) {
			return r.aside(t, w, a)
		}
	}
	return true
}

// drop has every rider of rs give back what it gave w, whose caller is
// gone.
func (rs riders) drop(t *Throttler, w *waiter) {
	for _, r := range rs {
		r.drop(t, w)
	}
}
