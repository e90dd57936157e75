package throttler

import (
	"context"
	"sync"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// A Permit is quota that Acquire admitted for one call whose cost is known
// only once it is done, as an LLM API's tokens are: settle it with the
// actual cost. It is safe for concurrent use.
type Permit struct {
	t        *Throttler
	estimate int
	score    int64    // server µs the call was counted at (0: admitted without Redis)
	margin   int64    // the margin it was counted with (µs; see core.Rules.Margin)
	members  []string // its members in every key (nil: admitted without Redis)
	lease    string   // its place in flight (WithInFlight; "" = none)
	// For a send held at its connection (see sendgate.go): the limit
	// limit generation its slot was reserved in, and whether it was one to go as
	// its reply came (which a lowered limit does not move).
	limitGen  int
	immediate bool

	once, doneOnce sync.Once
	err            error
}

// Acquire waits, as WaitN does, until estimate units of quota may be used
// at once, and returns a Permit holding them: they count at the moment
// Acquire returns, in every window that holds it, until Settle corrects
// them. Its errors are WaitN's. A Permit never settled keeps its estimate.
//
// With WithInFlight, the permit also holds a place in flight, taken in the
// same round trip as its quota, until Done or Settle: call one of them
// when the call ends, or the place stays taken for as long as the process
// lives.
func (t *Throttler) Acquire(ctx context.Context, estimate int) (*Permit, error) {
	res, lease, err := t.wait(ctx, "Acquire", estimate, wantPlace)
	if err != nil {
		return nil, err
	}
	return &Permit{t: t, estimate: estimate, score: res.score, margin: res.margin, members: res.members, lease: lease}, nil
}

// reserveToSend is Acquire for a call the library makes itself right
// after (Do, DoCost, the Transport): just before it returns, the slot is
// checked against the clock once more, and a permit whose call would now
// go later than its allowance (its goroutine ran late after it was
// admitted) is given back, and the call waits again, as a late sleeper
// does (see WaitN). With lead, it returns up to lead before a slot reserved
// through Redis (see waiter.leadFor), for a send that holds its write
// until then (see sendgate.go).
// It counts one wait in Stats, however many times it waited.
func (t *Throttler) reserveToSend(ctx context.Context, where string, n int, lead time.Duration) (_ *Permit, err error) {
	if err := usable(t, ctx, where); err != nil {
		return nil, err
	}
	start := t.now()
	defer func() { t.stats.wait(ctx, n, start, t.now(), err) }()
	for {
		res, lease, err := t.waitSlot(ctx, where, n, wantPlace, lead)
		if err != nil {
			return nil, err
		}
		p := &Permit{t: t, estimate: n, score: res.score, margin: res.margin, members: res.members, lease: lease, limitGen: res.limitGen, immediate: res.immediate}
		t.mu.Lock()
		_, late := t.offScore(reservation{score: p.score, margin: p.margin}, t.clock)
		if late <= 0 {
			t.mu.Unlock()
			return p, nil
		}
		t.stats.lateWakes.Add(1)
		t.health.forget(p.members, &t.hooks)
		t.mu.Unlock()
		t.release(ctx, p.members, p.score)
		p.Done()
	}
}

// Estimate returns the units Acquire admitted (0 for a nil or zero Permit).
func (p *Permit) Estimate() int {
	if p == nil {
		return 0
	}
	return p.estimate
}

// At returns the time the call was counted at, on the Redis server's clock:
// its place in the shared window, which the call is meant to reach the API
// within half the buffer of (see WithBuffer). It is the zero Time for a
// permit admitted without Redis (FailOpen, or FallbackLocal while Redis
// failed), and for a nil or zero Permit. Compare it with the API's own
// timestamps to see how far a call strayed from its slot.
func (p *Permit) At() time.Time {
	if p == nil || p.score == 0 {
		return time.Time{}
	}
	return time.UnixMicro(p.score)
}

// Settle corrects the permit to actual units, for every replica, in every
// window that holds the call's admission time (every limit's, with
// WithLimit):
//
//   - actual below the estimate: the surplus is given back at once; later
//     calls may use it;
//   - actual above it: the excess is added at the admission time, as debt:
//     every later call counts it, and waits until it slides out of the
//     window. Calls admitted before the debt was added could not count it,
//     so a window that holds the admission time of under-estimated permits
//     may hold more than limit calls: by at most the sum of their excesses
//     (actual minus estimate), and only windows holding those admission
//     times; no window is pushed over by anything but an under-estimate.
//     actual has no bound above: an excess at or above the largest limit
//     fills every window holding the admission time, and no call is
//     admitted into them until it slides out, as it would for any excess.
//     Each unit of debt is one member in every limit's key, all written in
//     one round trip; an excess above the largest limit is written as the
//     largest limit, which blocks every later call as long, so an actual
//     far above the limit (a bad reading of a response) costs no more
//     memory than one at it.
//
// Only the first call of Settle that settles counts (one with actual not
// negative, on a Permit Acquire returned): later ones do nothing and
// return what it returned. Settle ends the call: it calls Done. The settle
// makes at most one Redis call (none when actual equals the estimate),
// bounded by the Redis timeout (and by 250ms for a surplus), and Done
// makes one more for a permit holding a place in flight (see
// WithInFlight), so Settle takes up to two. ctx does not cut them short:
// the cost is for every replica, so a call whose context has ended is
// settled all the same. When the settle's call fails, Settle returns an
// error wrapping ErrRedis, and what it could not write (the surplus to
// remove, the debt to add) is written by the Throttler's next round trip
// that works (the debt counts in this process's own calls meanwhile, the
// surplus stops counting with the window regardless). A permit admitted
// without Redis (FailOpen, or FallbackLocal while Redis failed) settles
// nothing. actual below 0 is an error wrapping ErrInvalidArgument, and
// neither settles nor ends the permit; so is a nil or zero Permit (one
// Acquire did not return), which holds nothing.
func (p *Permit) Settle(ctx context.Context, actual int) error {
	if p == nil || p.t == nil {
		return invalidf("Settle(%d): the permit is nil or was not returned by Acquire", actual)
	}
	if actual < 0 {
		return invalidf("Settle(%d): actual must not be negative", actual)
	}
	p.once.Do(func() {
		t := p.t
		t.stats.settle(p.estimate, actual)
		p.err = p.settle(ctx, actual)
	})
	p.Done()
	return p.err
}

// Done ends the permit's call: with WithInFlight, its place in flight goes
// back to every replica at once (one Redis call, bounded by the Redis
// timeout; a place Redis did not take back is given back once more in the
// background, and otherwise expires with its lease). Settle calls Done.
// Only the first call counts; Done is safe to call on any permit, with or
// without a place, and does nothing on a nil or zero Permit (so that
// `defer p.Done()` may come before Acquire's error is checked).
func (p *Permit) Done() {
	if p == nil || p.t == nil {
		return
	}
	p.doneOnce.Do(func() {
		t := p.t
		if t.lease == nil || p.lease == "" {
			return
		}
		t.mu.Lock()
		t.lease.released(p.lease)
		t.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), t.opt.redisTimeout)
		defer cancel()
		if err := t.st.ReleaseLeases(ctx, []string{p.lease}, 0); err != nil {
			t.stats.redisError(err)
			t.mu.Lock()
			t.lease.giveBack(p.lease) // the keeper tries once more
			t.mu.Unlock()
		}
		t.stats.inFlightBy(-1)
	})
}

// settle applies p's first Settle.
func (p *Permit) settle(ctx context.Context, actual int) error {
	t := p.t
	if p.members == nil || actual == p.estimate {
		return nil
	}
	if actual < p.estimate {
		t.stats.returned.Add(uint64(p.estimate - actual))
		surplus := p.members[actual:]
		t.mu.Lock()
		t.health.forget(surplus, &t.hooks)
		t.mu.Unlock()
		if err := t.release(ctx, surplus, p.score); err != nil {
			return redisError(err)
		}
		// Waiters here may fit now: a worker sleeping until the next
		// slot it knew of looks again (other processes find the surplus
		// with their next round trip).
		t.worker.nudge()
		return nil
	}
	excess := min(actual-p.estimate, maxDebt(t.rules.Wins))
	t.stats.debt.Add(uint64(excess))
	return t.addDebt(ctx, p.score, excess, t.opt.order.debtMark(nil, p.members))
}

// maxDebt is the most debt one settle writes: the largest limit of wins,
// which fills every window holding the call's admission time; more would
// block no call longer (it slides out with the rest), and would only cost
// memory, a member per unit in every limit's key.
func maxDebt(wins []core.Window) int {
	n := 0
	for _, w := range wins {
		n = max(n, w.Limit)
	}
	return n
}

// debtNow is the server's time now (µs) for t, where a call written off its
// slot goes and its debt counts, by the runtime's clock from the last
// sample (see core.Clock.ServerByRuntime): the local clock (WithClock) may
// have stepped since, and debt scored by it would count seconds away from
// its call, in windows the call never went in and not in the one it did,
// and stay in Redis past reserve-ahead (seed 20137: a step of 4.2s as a
// request's connection came). A call with a slot had a sample.
func debtNow(t *Throttler) int64 { return t.clock.ServerByRuntime(time.Now(), t.now()) }

// addDebt adds n units as debt at score (server µs): members every later
// call counts, never given back, that leave with the window, ending in
// mark, the suffix of their call's tenant ("" for none: see debtMark),
// so that its share counts them. What Redis
// does not take (the error is returned, wrapping ErrRedis) is written by
// the next round trip that works, and counts in this process's own calls
// meanwhile.
func (t *Throttler) addDebt(ctx context.Context, score int64, n int, mark string) error {
	debt := make([]core.Entry, n)
	members := make([]string, n)
	for i := range debt {
		members[i] = core.DebtPrefix + t.ids.next() + mark
		debt[i] = core.Entry{Score: score, Member: members[i]}
	}
	t.mu.Lock()
	if t.hooks.onAdmit != nil {
		t.hooks.onAdmit(score, members)
	}
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opt.redisTimeout)
	defer cancel()
	if err := t.st.Add(ctx, debt); err != nil {
		// Written as calls admitted without Redis are.
		t.writeLater(err, "debt written later", func(o *owed) { o.replayLater(debt...) })
		return redisError(err)
	}
	// Not journaled: the journal's newest entry is the probe, and a debt
	// member scored back at the admission time would leave the set before
	// the journal's newer entries (see heal.go).
	return nil
}
