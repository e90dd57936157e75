package throttler

import "time"

// dormant reports whether t is idle as a Group means it (see Group): no
// call waits on it or holds a slot that has not yet passed by the buffer,
// no worker or lease keeper of its runs, it owes Redis nothing, it holds
// and wants no place in flight, it does not serve calls under its failure
// policy and its fallback window holds no call that still counts, and no
// shared pause it knows of is in force. An idle t holds no goroutine and
// nothing a caller or Redis still depends on, so it may be dropped. It
// also returns when t's last round trip reached Redis: a later one tells
// that t was used in between.
func (t *Throttler) dormant() (idle bool, lastRound time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lastRound = t.upkeep.round
	if t.worker.running || len(t.worker.queue) > 0 || t.worker.waiting > 0 || t.worker.pending(&t.owed) || t.news.running {
		return false, lastRound
	}
	if l := t.lease; l != nil && (l.keeper || l.wanted()) {
		return false, lastRound
	}
	now := t.now()
	if t.fallback.isDegraded() || now.Before(t.fallback.shareUntil) ||
		(t.fallback.local != nil && t.fallback.local.Holds(time.Now())) {
		return false, lastRound
	}
	serverNow := t.clock.Server(now)
	if t.shared.pausedTill > serverNow {
		// A call FailOpen admitted may sleep until the pause ends.
		return false, lastRound
	}
	// A call admitted through Redis sleeps until its slot, and goes up to
	// half the buffer late: the journal holds every such call of ours.
	passed := serverNow - t.rules.Buffer.Microseconds()
	for _, e := range t.health.journal.Entries {
		if e.Score > passed {
			return false, lastRound
		}
	}
	return true, lastRound
}
