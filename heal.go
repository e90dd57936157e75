package throttler

import (
	"log/slog"

	"github.com/go-throttler/throttler/internal/core"
)

// Redis can lose the shared window: a restart without persistence, a
// failover to a copy that missed the last writes, a deleted key. Its counts
// then miss calls that still count (every process's recent calls, and the
// slots reserved ahead), and a process that trusted them would admit too
// many. Two members that are not calls let every round trip notice:
//
//   - the marker (score -1, below every window and every trim) is written
//     to the first limit's key by every round trip of a process until one
//     of them has found or written it, and again with a heal. Every key of
//     the Throttler gets the same TTL, that of the longest window (see
//     config.ttl), so a process whose last round trip was within that TTL
//     knows no key can have expired since, and a missing marker means a
//     loss;
//   - the probe: the newest of this process's calls that still counts (see
//     journal) must still be in the key of the longest window. This catches
//     a failover to a copy that kept the marker but not the latest calls,
//     and a flush whose marker a new process wrote again (it cannot tell
//     the empty key from a new one). The first round trip to read the key
//     after a loss probes a call written before it: the newest call of
//     ours then came from a reply that arrived before the round trip was
//     planned. A probe given back meanwhile (a settled surplus, a caller
//     gone) cannot tell: the next probes, on calls written since, could
//     all find theirs. Such a round trip is owed a check: in turn, each
//     round trip also probes the newest call added before the oldest owed
//     one, until it finds one (the calls a round trip wrote went in one
//     command, so one found tells for them all) or none is left;
//   - the tally: a member of the first key that every round trip adding
//     calls to it with ZADD increments after its adds (claims PlaceScript
//     places, on windows read as logs whose probes are exact, do not),
//     and every round trip reads. A
//     round trip must find it at least as high as the replies that
//     arrived before it was planned left it; lower, Redis answers from a
//     copy that missed writes. It tells what a probe cannot in a
//     compacted window: a probe missing from the set but scored in a
//     bucket that holds calls may have been moved there, or lost while
//     the bucket counts the calls of others that the copy kept (seed
//     20155). Like the marker, it tells nothing across an idle TTL (the
//     key may have expired, and a new one counts from zero).
//
// A process that notices admits nothing from that round trip and heals: it
// pauses every process on the key (a shared pause, the member PauseUntil
// writes) until every call the lost window can have held has stopped
// counting: the longest window plus reserve-ahead from now. Every process
// reads the pause with its next round trip, so the heal does not depend on
// the others noticing the loss themselves, nor on idle processes writing
// their calls back; calls sleeping toward a slot inside the pause give it
// back and wait for one after it.

// lossChecks puts into attempt a, about to be sent, what lets its reply
// show a loss, and what a heal still has to write (o): the probe, the
// marker and the heal pause. Every round trip carries them, a Wait's and an
// Allow's alike.
func (h *health) lossChecks(a *core.Attempt, serverNow int64, o *owed) {
	if h.serverSeen > 0 {
		serverNow = min(serverNow, h.serverSeen)
	}
	h.journal.Trim(serverNow)
	h.planned = h.journal.Mark()
	a.Loss.Probes[0], _ = h.journal.Probe()
	h.olderIsNewest = false
	for len(h.unsure) > 0 {
		older, ok := h.journal.ProbeBefore(h.unsure[0])
		if !ok {
			// Every call written before the check that could not tell
			// was given back or left the journal: none is left to ask
			// about.
			h.unsure = h.unsure[1:]
			continue
		}
		if older == a.Loss.Probes[0] {
			h.olderIsNewest = true
		} else {
			a.Loss.Probes[1] = older
		}
		break
	}
	a.Loss.Mark = o.takeMark() || h.lastSeen == 0
	a.Loss.Tally = h.tally
	// The marker goes when one found missing, or a heal's, is owed; and
	// until a reply vouches for the key, with every round trip, for a
	// process whose round trips had only found it missing (a new key)
	// could not tell a window lost after them from a new key.
	a.Loss.Pause = o.healPauseOwed()
}

// noticeLoss reads the loss checks of reply r to attempt a, which reached
// the server at serverAt (µs), and reports whether Redis lost the window;
// the caller then heals (see lossRider.heal), and the reply's counts
// decide nothing. ttl is the keys' TTL in µs; what is owed goes to o.
func (h *health) noticeLoss(a *core.Attempt, r core.Reply, serverAt, ttl int64, o *owed) bool {
	// Our last round trip refreshed the key's TTL: if that was less than a
	// TTL ago, the key cannot have expired on its own.
	seenRecently := h.lastSeen > 0 && serverAt-h.lastSeen < ttl
	h.serverSeen = max(h.serverSeen, serverAt)
	missing := r.NoMark && !a.Loss.Mark // a marker we were writing ourselves proves nothing
	if missing {
		o.markLater(true) // with the next round trip
	} else {
		// Found, or written: only such a round trip vouches for the key.
		// (Two round trips of one process may cross, an Allow's and the
		// worker's: one that saw no marker on a new key must not make
		// the other's miss look like a loss.)
		h.lastSeen = serverAt
	}
	// A probe given back since the round trip was planned (a settled
	// surplus, an abandoned call) was removed by this process itself: its
	// absence proves nothing.
	const (
		none = iota
		found
		untold
		gone
	)
	// A probe whose score left the longest window by the time the round
	// trip reached the server may have been trimmed from the key: the
	// journal keeps calls by the server's time last seen, which can be
	// that far behind.
	state := func(i int) int {
		switch p := a.Loss.Probes[i]; {
		case p.Member == "" || p.Score <= serverAt-h.journal.W:
			return none
		case !r.Gone[i]:
			return found
		case h.journal.Holds(p.Member):
			return gone
		}
		return untold
	}
	newest, older := state(0), state(1)
	if h.olderIsNewest {
		older = newest
	}
	lost := newest == gone || older == gone
	// The calls each round trip wrote went in one command: a probe found
	// tells for every call of its round trip. The newest call's tells for
	// the round trip before this one; the older probe's, for the round
	// trip before the first check still owed.
	if len(h.unsure) > 0 && older == found {
		h.unsure = h.unsure[1:]
	}
	if newest == untold && (len(h.unsure) == 0 || h.unsure[len(h.unsure)-1] < h.planned) {
		h.unsure = append(h.unsure, h.planned) // ask, in turn, about a call added before this round trip
	}
	behind := h.readTally(a, r, seenRecently)
	return lost || missing && seenRecently || behind
}

// readTally reads the first key's tally from reply r to attempt a, and
// reports whether it went back: below what the replies that arrived
// before a was planned left it, while the key cannot have expired
// (seenRecently).
func (h *health) readTally(a *core.Attempt, r core.Reply, seenRecently bool) (behind bool) {
	after := r.Tally
	if r.Tallied {
		after++
	}
	switch {
	case r.Tally >= a.Loss.Tally:
		h.tally = max(h.tally, after)
	case a.Loss.Tally > h.tally:
		// Planned before a heal forgot the tally (see lost): the loss
		// is healed already.
	case seenRecently:
		return true
	default:
		h.tally = after // the key expired since: a new one counts anew
	}
	return false
}

// forget notes that admitted members were given back: their call did not
// go (hooks sees them).
func (h *health) forget(members []string, hooks *testHooks) {
	h.journal.Forget(members)
	if hooks.onRelease != nil {
		hooks.onRelease(members)
	}
}

// heal pauses every process on the key until the calls a lost window
// held have all stopped counting: the newest of them was reserved at most
// reserve-ahead from serverNow and counts for the longest window after that,
// or, counted with margins (see internal/core's margin.go), for as much again as the widest
// spread a round may count with. serverNow is the server's own reading of its
// clock when the round trip that saw the loss carried one: an estimate may be
// off by a local clock step the same round trip straddled. The pause holds
// here at once and is written to Redis with the next round trip, together with
// the marker.
func (lossRider) heal(t *Throttler, serverNow int64) {
	end := serverNow + t.rules.LongestW() + t.rules.Ahead.Microseconds()
	if t.rules.Buffer > 0 {
		end += core.MaxSpread
	}
	t.owed.heal(end)
	t.health.lost()
	t.stats.heals.Add(1)
	t.opt.logger.Warn("throttler: redis lost the shared window; pausing every process until the calls it held stop counting",
		slog.String("key", t.rules.Wins[0].Key), slog.Time("until", t.clock.Local(end)))
	t.shared.pauseTo(end, t.clock, &t.stats)
}

// admitted journals our call admitted at score with members: a probe for
// a lost window while it counts.
func (h *health) admitted(score int64, members []string) { h.journal.Add(score, members) }

// lost forgets what told of the window Redis lost: until the marker is
// back, a missing one says nothing new, and our calls went with the
// window, so none is left to probe for.
func (h *health) lost() {
	h.lastSeen = 0
	h.tally = 0
	h.journal.Clear()
	h.unsure = h.unsure[:0]
}

// lossRider carries the loss checks on every round trip: the probes, the
// marker and a heal's pause (see lossChecks), and reads them back (see
// noticeLoss); a loss heals at once, and the reply's counts decide nothing.
type lossRider struct{ noRider }

func (lossRider) ask(t *Throttler, a *core.Attempt, in *core.PlanIn) {
	t.health.lossChecks(a, in.Clock.Server(in.Now), &t.owed)
	in.Probe = a.Loss.Probes[0].Member != ""
	// A new key's TTL is set with its marker, and the key must outlive a
	// heal's pause.
	a.Expire.On = a.Expire.On || a.Loss.Mark || a.Loss.Pause > 0
}

// read measures on the server's clock as the reply read it: a local clock
// stepped ahead by more than a TTL would otherwise make a window lost a
// moment ago look long expired.
func (l lossRider) read(t *Throttler, rd *round, rr *replyRead) {
	rr.lost = t.health.noticeLoss(rd.Attempt, rd.Reply, rr.serverAt, t.rules.TTL().Microseconds(), &t.owed)
	if rr.lost {
		l.heal(t, rr.serverAt)
	}
}

func (lossRider) holds(a *core.Attempt) bool { return a.Loss.Pause > 0 }

func (lossRider) unsent(t *Throttler, a *core.Attempt) { t.owed.markLater(a.Loss.Mark) }

// healSent reports whether attempt a, whose round trip succeeded, wrote
// the heal's pause owed (until owed), or a later one.
func healSent(a *core.Attempt, owed int64) bool { return a.Loss.Pause >= owed }
