package throttler

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// News: a shared pause or a lowered limit reaches every replica at once.
//
// A round trip reads the pause and the lowered limit (see limits.go), so a
// process learns of them with its next one; but a call sleeping toward a
// slot it reserved ahead makes none, and would go inside a pause another
// replica set a moment ago. So whoever writes a pause or a lowered limit
// also publishes it on the first key's channel (PUBLISH, in the same round
// trip as the write), and a process with calls waiting or sleeping listens:
// news wakes its sleepers, which give a slot the pause covers, or one
// reserved under a higher limit, back and reserve again (see await), and
// its worker, which plans with what it now knows.
//
// A process listens from its first waiting call until it has had none for
// newsLinger, on a Pub/Sub connection of its own. News published before
// its subscription took would be missed: once Redis confirms the
// subscription (again after a reconnect), the listener reads the pause and
// the limit once, as news. Messages are lost while the connection is down;
// the confirmation of the new one makes up for them the same way.

// newsChannel is the channel news about the quota at key is published on:
// the key's own name.
func newsChannel(key string) string { return key }

// newsLinger is how long a listener stays subscribed once no call of its
// process waits: a burst of calls a moment later needs no new subscription.
const newsLinger = 250 * time.Millisecond

// news is what one message says: a pause until pause (server µs), and a
// first limit lowered to limit until limitEnd (limitSet: the message says
// what the limit is; limit 0 ends a lowering).
type news struct {
	pause           int64
	limit, limitEnd int64
	limitSet        bool
}

// String encodes n as published: "p <end>" or "l <limit> <end>".
func (n news) String() string {
	if n.limitSet {
		return "l " + strconv.FormatInt(n.limit, 10) + " " + strconv.FormatInt(n.limitEnd, 10)
	}
	return "p " + strconv.FormatInt(n.pause, 10)
}

// parseNews decodes a published message; ok is false for anything else.
func parseNews(s string) (n news, ok bool) {
	f := strings.Fields(s)
	num := func(i int) int64 {
		if i >= len(f) {
			ok = false
			return 0
		}
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || v < 0 {
			ok = false
		}
		return v
	}
	ok = len(f) > 0
	switch {
	case !ok:
	case f[0] == "p" && len(f) == 2:
		n.pause = num(1)
	case f[0] == "l" && len(f) == 3:
		n.limit, n.limitEnd, n.limitSet = num(1), num(2), true
	default:
		ok = false
	}
	return n, ok
}

// newsState is what a process knows of its listening, guarded by the
// Throttler's mu.
type newsState struct {
	sleeping int           // calls sleeping toward their slot (see await)
	woke     chan struct{} // closed when news comes, for the sleepers to look again
	running  bool          // a listener goroutine runs
	kick     chan struct{} // wakes the listener: the last sleeper woke
}

// newsWantedLocked reports whether the process has calls that news
// concerns: calls sleeping toward their slot. (A queued call learns of a
// pause or a lowered limit with the round trip that reserves it.)
func (t *Throttler) newsWantedLocked() bool { return t.news.sleeping > 0 }

// minNewsSleep is the shortest sleep toward a slot that starts a listener:
// news about a slot a few milliseconds away could not come in time.
const minNewsSleep = 5 * time.Millisecond

// listenLocked starts the listener when calls wait and none runs.
func (t *Throttler) listenLocked() {
	if t.news.running || !t.newsWantedLocked() {
		return
	}
	t.news.running = true
	if t.news.kick == nil {
		t.news.kick = make(chan struct{}, 1)
	}
	go t.listen()
}

// sleepLocked registers a call about to sleep d toward its slot, and
// returns the channel that news closes.
func (t *Throttler) sleepLocked(d time.Duration) <-chan struct{} {
	t.news.sleeping++
	if t.news.woke == nil {
		t.news.woke = make(chan struct{})
	}
	if d >= minNewsSleep {
		t.listenLocked()
	}
	return t.news.woke
}

// wakeLocked ends what sleepLocked began.
func (t *Throttler) wakeLocked() {
	t.news.sleeping--
	if !t.newsWantedLocked() && t.news.running {
		// The listener lingers from now on.
		select {
		case t.news.kick <- struct{}{}:
		default:
		}
	}
}

// listen is the listener goroutine: it subscribes, applies what it hears,
// and exits once no call has waited for newsLinger.
func (t *Throttler) listen() {
	var (
		watch      *subscription
		retryAt    time.Time
		lingerTill time.Time
	)
	defer func() {
		if watch != nil {
			watch.close()
		}
	}()
	for {
		t.mu.Lock()
		now := t.now()
		if t.newsWantedLocked() {
			lingerTill = time.Time{}
		} else if lingerTill.IsZero() {
			lingerTill = now.Add(newsLinger)
		}
		if !lingerTill.IsZero() && !now.Before(lingerTill) {
			t.news.running = false
			t.mu.Unlock()
			return
		}
		kick := t.news.kick
		t.mu.Unlock()
		if watch == nil && !now.Before(retryAt) {
			watch = t.st.watchNews(newsChannel(t.wins[0].key))
		}
		var heard, ready, lost <-chan struct{}
		if watch != nil {
			heard, ready, lost = watch.heard, watch.ready, watch.done
		}
		wake := lingerTill
		if watch == nil {
			wake = minTime(nonZero(wake, retryAt), retryAt)
		}
		var (
			timer <-chan time.Time
			tm    *time.Timer
		)
		if !wake.IsZero() {
			tm = time.NewTimer(max(0, wake.Sub(now)))
			timer = tm.C
		}
		select {
		case <-heard:
			t.mu.Lock()
			for _, m := range watch.take() {
				if n, ok := parseNews(m); ok {
					t.newsLocked(n)
				}
			}
			t.mu.Unlock()
		case <-ready:
			// News published before the subscription took, or while the
			// connection was down, was not heard: read what it said.
			t.readNews()
		case <-lost:
			watch.close()
			if watch.closed {
				t.mu.Lock()
				t.news.running = false
				t.mu.Unlock()
				watch = nil
				return // the client was closed: nothing more will come
			}
			watch, retryAt = nil, t.now().Add(time.Second)
		case <-kick:
		case <-timer:
		}
		if tm != nil {
			tm.Stop()
		}
	}
}

// nonZero returns a unless it is zero, else b.
func nonZero(a, b time.Time) time.Time {
	if a.IsZero() {
		return b
	}
	return a
}

// readNews reads the pause and the lowered limit from Redis and applies
// them as news.
func (t *Throttler) readNews() {
	ctx, cancel := context.WithTimeout(context.Background(), t.opt.redisTimeout)
	defer cancel()
	r, err := t.st.readMeta(ctx)
	if err != nil {
		t.observeRedisError(err)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.newsLocked(news{pause: r.pause})
	t.newsLocked(news{limit: r.limit, limitEnd: r.limitEnd, limitSet: true})
}

// newsLocked applies news: a later pause, or the limit it states, as a
// round trip that read them would; then sleepers look again, and the
// worker plans anew.
func (t *Throttler) newsLocked(n news) {
	changed := false
	if n.pause > t.shared.pausedTill {
		t.pauseLocked(n.pause)
		changed = true
	}
	if n.limitSet {
		lowered, till := 0, int64(0)
		if n.limit > 0 && n.limitEnd > 0 && n.limit < int64(t.wins[0].limit) {
			lowered, till = int(n.limit), n.limitEnd
		}
		if lowered != t.shared.lowered || till != t.shared.lowerTill {
			t.lowerLocked(lowered, till)
			changed = true
		}
	}
	if !changed {
		return
	}
	// What the last reply told of the free slots was told under the old
	// pause or limit: the next round learns them again.
	t.known.near, t.known.slots, t.known.capped = true, nil, [levels][]int64{}
	if t.news.woke != nil {
		close(t.news.woke)
		t.news.woke = nil
	}
	t.nudge()
}
