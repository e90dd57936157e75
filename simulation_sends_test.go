package throttler

import (
	"fmt"

	"github.com/go-throttler/throttler/internal/sim"
)

// What the simulation reads of the library's sends through net/http (see
// sendGate), apart so that the rest of it reads only what every face has.

// simSentAsDebt reports whether the library wrote call's request off its
// slot and counted the call as debt where it went: a call that could not
// wait for a new slot at its connection (its context ended, or its
// deadline came first), which docs/guarantees.md lets a window exceed
// the limit by, as a settled excess. Such a call gave its slot back
// (its permit holds no score) and was marked late before its write; a
// call found late only at its write (the gate gave up after
// maxGatePasses, or an HTTP/2 stream waited) kept its slot and is not
// debt.
func simSentAsDebt(call *sim.HTTPCall) bool {
	ctx := call.Context()
	if ctx == nil {
		return false
	}
	g, _ := ctx.Value(gateKey{}).(*sendGate)
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.calls {
		if c.late && c.p.score == 0 {
			return true
		}
	}
	return false
}

// simSendStats sums up what the processes' Stats say of their sends.
func simSendStats(reps []*simReplica) string {
	var reslotted, late uint64
	for _, r := range reps {
		s := r.th.Stats()
		reslotted += s.Sends.Reslotted
		late += s.Sends.SentLate
	}
	return fmt.Sprintf(" (the library: %d reslotted, %d written late)", reslotted, late)
}
