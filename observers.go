package throttler

import (
	"context"
	"net/http"
	"time"

	"github.com/go-throttler/throttler/counters"
)

// Observers added to what is in use: a Throttler's (AddObserver), every
// Throttler of a Group's (Group.AddObserver) and a Transport's
// (Transport.AddObserver), and the events only they report (WaitInfo,
// Refusal).

// WaitInfo is one wait (see Stats) as Observer.Waited reports it.
type WaitInfo struct {
	// N is the units the wait asked for: 1 for Wait, Do, Wrap and a
	// Transport's request but for one Cost prices, n for WaitN, the
	// estimate for Acquire and DoCost.
	N int
	// Tenant is the tenant of the call (see ContextWithTenant; a
	// Transport's Tenant sets it on the request's context), "" without
	// one. Unlike Stats.Tenants, it names every tenant, however many: an
	// Observer that keeps a series per tenant bounds them itself.
	Tenant string
	// Start is when the call began to wait and End when it returned, on
	// the Throttler's clock (time.Now unless WithClock set another):
	// End.Sub(Start) is the wait's length, as Stats.Waited sums it over
	// the waits admitted.
	Start, End time.Time
	// Err is what the wait returned: nil when it was admitted.
	Err error
}

// AddObserver adds o to the Observers of t: from the moment it returns,
// each event is reported to every Observer t has, in the order they were
// given (WithObserver's first), each in the way Observer describes. It is
// safe to call at any time, concurrently with t's use and with other calls
// of AddObserver. An Observer cannot be removed; one whose fields are all
// nil adds nothing.
//
// An event under way as AddObserver is called may be reported to o or not,
// but for Degraded: when o.Degraded is set and t's calls follow the failure
// policy (Degraded was last reported true), AddObserver calls o.Degraded(true)
// before it returns, so that o's Degraded calls alternate from true (see
// Observer.Degraded). A Throttler with no Observer pays one atomic load per
// event for the feature, and nothing else.
func (t *Throttler) AddObserver(o Observer) {
	if t == nil || t.st == nil {
		return
	}
	if o.Degraded == nil {
		t.stats.addObserver(o)
		return
	}
	// Degraded is reported under t.mu: o sees the state then, or the
	// reports after it, never both.
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stats.addObserver(o)
	if !t.fallback.degraded.IsZero() {
		o.Degraded(true)
	}
}

// addObserver joins o to the Observers m reports to.
func (m *meter) addObserver(o Observer) {
	for {
		old := m.obs.Load()
		joined := o
		if old != nil {
			joined = old.join(o)
		}
		if m.obs.CompareAndSwap(old, &joined) {
			return
		}
	}
}

// join returns an Observer whose every function calls a's and then b's,
// where both are set.
func (a *Observer) join(b Observer) Observer {
	return Observer{
		Admitted:     join2(a.Admitted, b.Admitted),
		Paused:       join1(a.Paused, b.Paused),
		LimitChanged: join1(a.LimitChanged, b.LimitChanged),
		RedisError:   join1(a.RedisError, b.RedisError),
		Settled:      join2(a.Settled, b.Settled),
		InFlight:     join1(a.InFlight, b.InFlight),
		PlaceWait:    join0(a.PlaceWait, b.PlaceWait),
		Rejected:     join1(a.Rejected, b.Rejected),
		Degraded:     join1(a.Degraded, b.Degraded),
		Waited:       join2(a.Waited, b.Waited),
		Sent:         join1(a.Sent, b.Sent),
		Shadowed:     join2(a.Shadowed, b.Shadowed),
	}
}

func join0(a, b func()) func() {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func() { a(); b() }
}

func join1[A any](a, b func(A)) func(A) {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(x A) { a(x); b(x) }
}

func join2[A, B any](a, b func(A, B)) func(A, B) {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(x A, y B) { a(x, y); b(x, y) }
}

// AddObserver has newObserver called with each Throttler g holds now and
// with each one For makes from now on, and adds the Observer it returns to
// that Throttler (see Throttler.AddObserver): each Throttler gets exactly
// one, and a Throttler For hands out after AddObserver has returned has
// it, from before its first use. Each Throttler gets its own call, so that
// newObserver may keep what it records apart by Throttler (its Key names
// the key only by its digest, see Group). Throttlers For made but dropped
// unused (see For) are not passed to it.
//
// The Throttlers g holds are passed to newObserver on the caller's
// goroutine, without g's lock: For goes on meanwhile, and a Throttler it
// hands out before AddObserver returns may be used before its Observer is
// added. A Throttler For makes is passed to newObserver under g's lock, on
// the goroutine of that For, before it is handed out. newObserver may thus
// be called concurrently with itself; it must return quickly and must not
// call g. A nil newObserver adds nothing.
func (g *Group) AddObserver(newObserver func(t *Throttler) Observer) {
	if newObserver == nil {
		return
	}
	// Every Throttler is either held now, and passed below, or made by a
	// For that takes the lock after this one, and passed by observeLocked:
	// never both, never neither.
	g.mu.Lock()
	g.observers = append(g.observers, newObserver)
	held := make([]*Throttler, len(g.ring))
	for i, e := range g.ring {
		held[i] = e.t
	}
	g.mu.Unlock()
	for _, t := range held {
		t.AddObserver(newObserver(t))
	}
}

// observeLocked adds g's Observers to t, a Throttler For is about to hand
// out for the first time.
func (g *Group) observeLocked(t *Throttler) {
	for _, newObserver := range g.observers {
		t.AddObserver(newObserver(t))
	}
}

// TransportObserver receives a Transport's events as they happen. Set the
// fields you need; nil fields cost nothing. The waits of the Transport's
// requests are the Throttlers' to report (see Observer.Waited).
type TransportObserver struct {
	// Refused is called, on the goroutine of RoundTrip, each time the API
	// refuses a request the Transport sent through a Throttler: a
	// response that Counters read as Pause or RetryCall, and a 429 or 503
	// that they make nothing of (see Transport). It is called with
	// the request's context once the Transport has followed the refusal
	// (paused the Throttler for a Pause, and for a RetryCall it will
	// retry, waited out the delay before the retry, up to 2s), and before
	// it sends the request again or returns the response: Refusal.At is
	// when the refusal was followed, before that delay. It must return
	// quickly; it may call the Throttler.
	Refused func(ctx context.Context, r Refusal)
}

// Refusal is one refusal of the API, as TransportObserver.Refused reports
// it.
type Refusal struct {
	// Throttler is the one Route picked for the request.
	Throttler *Throttler
	// StatusCode is the response's status, such as 429.
	StatusCode int
	// Verdict is what Counters read the response as: Pause or RetryCall.
	Verdict counters.Verdict
	// Attempt counts the request's sends before this one: 0 for its first,
	// 1 for its first retry.
	Attempt int
	// Retry reports that the Transport sends the request again: Retries
	// allows one more, the request's body can be made afresh, and for a
	// RetryCall the request's context did not end during the delay. The
	// retry waits for the Throttler to admit it as the first send did.
	// Otherwise the caller gets this response.
	Retry bool
	// At is when the Transport had read the response and followed it
	// (paused the Throttler for a Pause), on the Throttler's clock
	// (time.Now unless WithClock set another), as WaitInfo's times are:
	// before the delay a RetryCall waits out before its retry, and so
	// up to that delay before Refused is called.
	At time.Time
}

// AddObserver adds o to the TransportObservers of tr: from the moment it
// returns, each event is reported to every one tr has, in the order they
// were added. It is safe to call at any time, concurrently with tr's use
// and with other calls of AddObserver. A TransportObserver cannot be
// removed.
func (tr *Transport) AddObserver(o TransportObserver) {
	for {
		old := tr.obs.Load()
		joined := o
		if old != nil {
			joined.Refused = join2(old.Refused, o.Refused)
		}
		if tr.obs.CompareAndSwap(old, &joined) {
			return
		}
	}
}

// refused reports a refusal to tr's TransportObservers.
func (tr *Transport) refused(req *http.Request, r Refusal) {
	if o := tr.obs.Load(); o != nil && o.Refused != nil {
		o.Refused(req.Context(), r)
	}
}
