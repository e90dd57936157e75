package throttler

import (
	"log/slog"
	"sync"
	"time"
)

// SendInfo is one call's send as Observer.Sent reports it: a call whose
// request a Transport sent through net/http, or that Do, DoCost, Wrap or
// WrapCost sent through net/http with the context they pass (see
// Transport).
type SendInfo struct {
	// Delay is how long after its slot the call's connection came: when
	// its request could have been written had it not waited for a new
	// slot. net/http's dial (TCP and TLS) and its wait for a pooled
	// connection are there; so is the time between the call's admission
	// and its request reaching net/http.
	Delay time.Duration
	// Reslotted reports that the connection came later than the slot
	// allows (see WithBuffer): the call gave its slot back and took a new
	// one, holding the connection meanwhile, and its request was written
	// on the new slot.
	Reslotted bool
	// Late reports that the request was written later than its slot
	// allows all the same: its context ended, or the earliest slot lay
	// past its deadline, before a new slot came (its units then count as
	// debt at the time it went), or, with HTTP/2, its stream waited for
	// the server to allow one more after the connection came.
	Late bool
	// Rewritten reports a second write of a request already written once:
	// net/http wrote it again on a new connection, the first having
	// turned out closed, and the first write may have reached the API. It
	// took a slot of its own (Reslotted), or, when none came in time,
	// counted as debt where it went (Late).
	Rewritten bool
}

// sent counts a call's send (see SendInfo), written at now, and reports it.
func (m *meter) sent(now time.Time, s SendInfo) {
	m.sendDelay.add(s.Delay)
	if s.Reslotted {
		m.reslotted.Add(1)
	}
	if s.Late {
		m.sentLate.Add(1)
	}
	if o := m.obs.Load(); o != nil && o.Sent != nil {
		o.Sent(s)
	}
	if msg, attrs := m.watch.add(now, s); msg != "" {
		m.logger.Warn(msg, append(m.logAttrs[:len(m.logAttrs):len(m.logAttrs)], attrs...)...)
	}
}

// sendWatch tells, once per Throttler, that its calls keep getting their
// connections later than their slots allow: each costs a new slot, a round
// trip and a wait, and a pool or buffer that fits the API's distance
// would spare them. A cold start (every connection dialed at once, after a
// deploy or an idle spell) passes: it takes two periods in a row, each of
// watchPeriod sends or a minute, with at least a tenth of their sends
// reslotted or late.
type sendWatch struct {
	mu     sync.Mutex
	start  time.Time
	sends  int
	bad    int       // reslotted or late
	delays Histogram // the period's
	badRun int       // periods in a row with a tenth bad
	told   bool
}

// watchPeriod is how many sends a period of the watch counts, at most.
const watchPeriod = 100

// add counts s, sent at now, and returns the warning to log, if it is due,
// with its attributes.
func (w *sendWatch) add(now time.Time, s SendInfo) (string, []any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.told {
		return "", nil
	}
	if w.sends == 0 {
		w.start = now
	}
	w.sends++
	if s.Reslotted || s.Late {
		w.bad++
	}
	w.delays.add(s.Delay)
	if w.sends < watchPeriod && now.Sub(w.start) < time.Minute {
		return "", nil
	}
	if w.bad >= 5 && 10*w.bad >= w.sends {
		w.badRun++
	} else {
		w.badRun = 0
	}
	sends, bad := w.sends, w.bad
	p90 := w.delays.Quantile(0.9)
	w.sends, w.bad, w.delays = 0, 0, Histogram{}
	if w.badRun < 2 {
		return "", nil
	}
	w.told = true
	within := "more than " + sendDelayBounds[len(sendDelayBounds)-1].String()
	if p90 >= 0 {
		within = p90.String()
	}
	return "throttler: calls keep getting their connections later than their slots allow, and wait for new slots: " +
			"give the base transport more idle connections per host (http.Transport.MaxIdleConnsPerHost), or a buffer (WithBuffer) of about twice the delay",
		[]any{slog.Int("sends", sends), slog.Int("reslotted_or_late", bad), slog.String("delay_p90", within)}
}
