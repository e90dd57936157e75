package throttler

import "github.com/go-throttler/throttler/internal/core"

// fairOrder orders the waiting calls of each priority across their
// tenants by start-time fair queuing: a call joining the queue is stamped
// with a start tag, the later of its priority's virtual time and its
// tenant's last finish tag there, and its tenant's finish tag moves on by
// the call's units over the tenant's weight; calls of one priority go in
// the order of their start tags, but that, while a tenant is held to a
// cap across replicas, the calls of the tenants that are not go ahead of
// its (see uncappedFirst in tenants.go). A priority's virtual time is the start
// tag of its last call served. Each priority keeps its own tags: a
// high-priority call of a flooding tenant, served ahead of every normal
// call, must not move the normal calls' virtual time past the flood's
// queued calls, behind which a light tenant's next call would then queue.
// A tenant whose finish tag the virtual time has passed is forgotten:
// stamped afresh, it would start at the virtual time all the same, so a
// priority's table holds only tenants with calls queued or served ahead
// of the others (a call whose caller gives up while it is queued is
// taken back: see unstamp). The tables are cleared whenever no call
// waits, queued or in the round trip under way (see workerState.idle),
// and when a call joins then: a call that a round trip takes and the
// store refuses comes back with its tag, and must stay ahead of its
// tenant's calls that joined meanwhile (seed 40248: a call of 4 units, sent back each window while
// its tenant's calls that joined while the window's round trips were out
// went ahead of it, waited 5 windows).
//
// Its fields are under the Throttler's mutex, and change only through its
// methods.
type fairOrder struct {
	level [core.Levels]fairTags
}

// fairTags are one priority's tags.
type fairTags struct {
	virtual float64            // the start tag of the last call served
	finish  map[string]float64 // by tenant: its last call's finish tag
	swept   int                // len(finish) after the last sweep
}

// stamp returns the start tag of a call of n units of tenant's, of
// weight weight (see rank; 0 counts as 1), of priority p, joining the
// queue; fresh when no call waited before it (the order starts afresh).
func (f *fairOrder) stamp(p core.Level, tenant string, weight float64, n int, fresh bool) float64 {
	if fresh {
		f.reset()
	}
	l := &f.level[p]
	if l.finish == nil {
		l.finish = map[string]float64{}
	}
	start := max(l.virtual, l.finish[tenant])
	if weight <= 0 {
		weight = 1
	}
	l.finish[tenant] = start + float64(n)/weight
	if len(l.finish) > 2*l.swept+16 {
		l.sweep()
	}
	return start
}

// unstamp takes back what stamp charged tenant for a call of n units, of
// weight weight and priority p, stamped start, that left the queue
// unserved (its caller gave up): the tenant's finish tag moves back by
// the call's units over its weight (to the call's start tag when it was
// the tenant's last), so that a tenant is charged for the calls served,
// and a tenant whose calls all left is forgotten once the virtual time
// has reached that tag. Charged for them, a tenant whose calls timed out
// queued its next call behind every other tenant's queued then, and a
// priority whose calls were not served (a higher one took every slot)
// kept every tenant whose calls gave up (100,000 of them for 100,000).
func (f *fairOrder) unstamp(p core.Level, tenant string, weight float64, n int, start float64) {
	l := &f.level[p]
	fin, ok := l.finish[tenant]
	if !ok {
		return
	}
	if weight <= 0 {
		weight = 1
	}
	if d := float64(n) / weight; fin == start+d {
		fin = start
	} else {
		fin -= d
	}
	if fin <= l.virtual {
		delete(l.finish, tenant)
		return
	}
	l.finish[tenant] = fin
}

// reset starts the order afresh, no call waiting: no tenant is kept.
func (f *fairOrder) reset() {
	for i := range f.level {
		l := &f.level[i]
		l.virtual, l.swept = 0, 0
		clear(l.finish)
	}
}

// served notes that a call of priority p and start tag start left the
// queue with a slot.
func (f *fairOrder) served(p core.Level, start float64) {
	f.level[p].virtual = max(f.level[p].virtual, start)
}

// sweep forgets the tenants whose finish tag the virtual time has passed.
func (l *fairTags) sweep() {
	for tenant, fin := range l.finish {
		if fin <= l.virtual {
			delete(l.finish, tenant)
		}
	}
	l.swept = len(l.finish)
}
