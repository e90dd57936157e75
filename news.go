package throttler

import (
	"context"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
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
// Near the limit, the same channel carries the slots a process claims
// while it contends for them (core.Known.Announce: after it lost a turn):
// its round trip publishes their scores with the claims. The others drop
// them from the free slots they know (core.Known.Take) and claim the next
// ones, instead of racing for the same slots, losing the turn and taking a
// round trip to give them back. A message missed or late costs only that
// race: the count decides every admission.
//
// A process listens from its first call sleeping toward its slot, or
// queued near the limit while it contends, until it has had none for
// newsLinger, on a Pub/Sub connection of its own. News published before
// its subscription took would be missed: once Redis confirms the
// subscription (again after a reconnect), the listener reads the pause and
// the limit once, as news. Messages are lost while the connection is down;
// the confirmation of the new one makes up for them the same way.

// newsLinger is how long a listener stays subscribed once no call of its
// process waits: a burst of calls a moment later needs no new subscription.
const newsLinger = 250 * time.Millisecond

// newsState is what a process knows of its listening, guarded by the
// Throttler's mu.
type newsState struct {
	sleeping int           // calls sleeping toward their slot (see await)
	queued   bool          // calls stay queued near the limit (see queue)
	woke     chan struct{} // closed when news comes, for the sleepers to look again
	running  bool          // a listener goroutine runs
	kick     chan struct{} // wakes the listener: the last sleeper woke
}

// wanted reports whether the process has calls that news concerns: calls
// sleeping toward their slot, and calls queued near the limit while the
// process contends for slots, whose next round claims the free slots it
// knows, less those other processes announce they take (see
// core.Known.Take). (A queued call learns of a pause or a lowered limit
// with the round trip that reserves it.)
func (n *newsState) wanted() bool { return n.sleeping > 0 || n.queued }

// wakeAll wakes the sleepers, to look again at a pause or a limit that
// changed.
func (n *newsState) wakeAll() {
	if n.woke != nil {
		close(n.woke)
		n.woke = nil
	}
}

// ended notes that the listener ended.
func (n *newsState) ended() { n.running = false }

// queue notes whether calls stay queued near the limit after a round's
// plan, and reports whether a listener is to start (it is then counted as
// running).
func (n *newsState) queue(near bool) (start bool) {
	was := n.queued
	n.queued = near
	switch {
	case near && !n.running:
		n.running = true
		if n.kick == nil {
			n.kick = make(chan struct{}, 1)
		}
		return true
	case was && !near && !n.wanted() && n.running:
		select { // the listener lingers from now on
		case n.kick <- struct{}{}:
		default:
		}
	}
	return false
}

// minNewsSleep is the shortest sleep toward a slot that starts a listener:
// news about a slot a few milliseconds away could not come in time.
const minNewsSleep = 5 * time.Millisecond

// sleep registers a call about to sleep d toward its slot, and returns
// the channel that news closes, and whether a listener is to start (it
// is then counted as running).
func (n *newsState) sleep(d time.Duration) (woke <-chan struct{}, start bool) {
	n.sleeping++
	if n.woke == nil {
		n.woke = make(chan struct{})
	}
	if d >= minNewsSleep && !n.running {
		n.running, start = true, true
		if n.kick == nil {
			n.kick = make(chan struct{}, 1)
		}
	}
	return n.woke, start
}

// wake ends what sleep began.
func (n *newsState) wake() {
	n.sleeping--
	if !n.wanted() && n.running {
		// The listener lingers from now on.
		select {
		case n.kick <- struct{}{}:
		default:
		}
	}
}

// listener is the listener goroutine's own state: it subscribes, applies
// what it hears, and exits once no call has waited for newsLinger.
type listener struct {
	t          *Throttler
	watch      *redisstore.Subscription
	retryAt    time.Time // after a failed subscription: when to try again
	lingerTill time.Time // no call waits: when the listener exits (zero while one does)
}

// runListener is the listener goroutine (see newsState).
func runListener(t *Throttler) {
	l := listener{t: t}
	defer func() {
		if l.watch != nil {
			l.watch.Close()
		}
	}()
	for l.turn() {
	}
}

// turn waits for news, a kick or the end of the linger, and applies what
// came. It reports whether the listener goes on.
func (l *listener) turn() bool {
	t := l.t
	now, kick, ok := l.lingering()
	if !ok {
		return false
	}
	if l.watch == nil && !now.Before(l.retryAt) {
		l.watch = t.st.WatchNews(redisstore.NewsChannel(t.rules.Wins[0].Key))
	}
	var heard, ready, lost <-chan struct{}
	wake := l.lingerTill
	if l.watch != nil {
		heard, ready, lost = l.watch.Heard, l.watch.Ready, l.watch.Done
	} else {
		wake = minTime(nonZero(wake, l.retryAt), l.retryAt)
	}
	var timer <-chan time.Time
	if !wake.IsZero() {
		tm := time.NewTimer(max(0, wake.Sub(now)))
		defer tm.Stop()
		timer = tm.C
	}
	select {
	case <-heard:
		l.hear(l.watch.Take())
	case <-ready:
		// News published before the subscription took, or while the
		// connection was down, was not heard: read what it said.
		l.readNews()
	case <-lost:
		l.watch.Close()
		if l.watch.Closed {
			t.mu.Lock()
			t.news.ended()
			t.mu.Unlock()
			l.watch = nil
			return false // the client was closed: nothing more will come
		}
		l.watch, l.retryAt = nil, t.now().Add(time.Second)
	case <-kick:
	case <-timer:
	}
	return true
}

// lingering tells the listener whether to go on (ok), and, when it goes
// on, the time and what wakes it when the last sleeper wakes. It starts
// the linger when no call waits, and ends the listener when the linger is
// over.
func (l *listener) lingering() (now time.Time, kick <-chan struct{}, ok bool) {
	t := l.t
	t.mu.Lock()
	defer t.mu.Unlock()
	now = t.now()
	if t.news.wanted() {
		l.lingerTill = time.Time{}
	} else if l.lingerTill.IsZero() {
		l.lingerTill = now.Add(newsLinger)
	}
	if !l.lingerTill.IsZero() && !now.Before(l.lingerTill) {
		t.news.ended()
		return now, nil, false
	}
	return now, t.news.kick, true
}

// hear applies the news messages heard.
func (l *listener) hear(msgs []string) {
	t := l.t
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range msgs {
		if n, ok := core.ParseNews(m); ok {
			t.newsLocked(n)
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
func (l *listener) readNews() {
	t := l.t
	ctx, cancel := context.WithTimeout(context.Background(), t.opt.redisTimeout)
	defer cancel()
	r, err := t.st.ReadMeta(ctx)
	if err != nil {
		t.stats.redisError(err)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.newsLocked(core.News{Pause: r.Pause})
	t.newsLocked(core.News{Limit: r.Limit, LimitEnd: r.LimitEnd, LimitSet: true})
}

// newsLocked applies news: a later pause, or the limit it states, as a
// round trip that read them would; then sleepers look again, and the
// worker plans anew.
func (t *Throttler) newsLocked(n core.News) {
	if len(n.Taken) > 0 {
		if n.From != t.ids.name() {
			t.known.Take(n.Taken, len(t.worker.queue) > 0)
		}
		return
	}
	changed := t.shared.pauseTo(n.Pause, t.clock, &t.stats)
	if n.LimitSet && t.shared.learnLimit(n.Limit, n.LimitEnd, t.Limit(), &t.stats) {
		changed = true
	}
	if !changed {
		return
	}
	// What the last reply told of the free slots was told under the old
	// pause or limit: the next round learns them again.
	t.known.Forget()
	t.news.wakeAll()
	t.worker.nudge()
}

// announceRider publishes the slots a contending process claims.
type announceRider struct{ noRider }

// claim has attempt a publish the slots plan p claims near the limit while
// this process contends for slots (see core.Known.Announce).
func (announceRider) claim(t *Throttler, rd *round) {
	a, p := rd.Attempt, rd.Plan
	if !a.Exact || len(p.Claims) == 0 || !t.known.Announcing() {
		return
	}
	for _, c := range p.Claims {
		// One score per unit, core.MaxTaken at most: the rest of a costly
		// call's units go unannounced, a hint missed (the count decides).
		for range min(c.N, core.MaxTaken-len(a.Taken)) {
			a.Taken = append(a.Taken, c.Score)
		}
	}
}
