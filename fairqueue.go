package throttler

// fairOrder orders the waiting calls of one priority across their tenants
// by start-time fair queuing: a call joining the queue is stamped with a
// start tag, the later of the queue's virtual time and its tenant's last
// finish tag, and its tenant's finish tag moves on by the call's units
// over the tenant's weight; calls go in the order of their start tags.
// The virtual time is the start tag of the last call served. A tenant
// whose finish tag the virtual time has passed is forgotten: stamped
// afresh, it would start at the virtual time all the same, so the table
// holds only tenants with calls queued or served ahead of the others. The
// table is cleared whenever the queue empties.
//
// Its fields are under the Throttler's mutex, and change only through its
// methods.
type fairOrder struct {
	weight  func(tenant string) float64 // WithTenantWeight; nil: all weigh 1
	virtual float64                     // the start tag of the last call served
	finish  map[string]float64          // by tenant: its last call's finish tag
	swept   int                         // len(finish) after the last sweep
}

// stamp returns the start tag of a call of n units of tenant's joining
// the queue, which held queued calls before it (else the order starts
// afresh).
func (f *fairOrder) stamp(tenant string, n int, queued int) float64 {
	if queued == 0 {
		f.virtual, f.swept = 0, 0
		clear(f.finish)
	}
	if f.finish == nil {
		f.finish = map[string]float64{}
	}
	start := max(f.virtual, f.finish[tenant])
	f.finish[tenant] = start + float64(n)/weightOf(f.weight, tenant)
	if len(f.finish) > 2*f.swept+16 {
		f.sweep()
	}
	return start
}

// served notes that a call of start tag start left the queue with a slot.
func (f *fairOrder) served(start float64) {
	f.virtual = max(f.virtual, start)
}

// sweep forgets the tenants whose finish tag the virtual time has passed.
func (f *fairOrder) sweep() {
	for tenant, fin := range f.finish {
		if fin <= f.virtual {
			delete(f.finish, tenant)
		}
	}
	f.swept = len(f.finish)
}
