package throttler

import (
	"context"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/redisstore"
)

// send makes attempt a's round trip, and learns from its reply the server's
// clock. A round trip that fails on its connection, or on a server state
// that passes, is sent again within the Redis timeout (see resendable).
func (t *Throttler) send(ctx context.Context, a *core.Attempt) (core.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, t.opt.redisTimeout)
	defer cancel()
	if a.Expire.On {
		a.Expire.TTLs = append(a.Expire.TTLs[:0], a.Expire.First)
		for ttl := t.rules.TTL(); len(a.Expire.TTLs) < len(t.rules.Wins); {
			a.Expire.TTLs = append(a.Expire.TTLs, ttl)
		}
	}
	var (
		r          core.Reply
		err        error
		sent, recv time.Time
	)
	for try := 0; ; try++ {
		sent = t.now()
		r, err = t.st.Reserve(ctx, a)
		recv = t.now()
		if err == nil {
			break
		}
		t.stats.redisError(err)
		if !resendable(ctx, err, try) {
			return core.Reply{}, err
		}
		// The connection broke, or the server said it was busy for a
		// moment: send the round again, on another connection, within
		// what is left of its timeout, rather than fail its calls for a
		// blip. It may have been applied: see core.Attempt.Resent.
		t.stats.roundsRetried.Add(1)
		a.Resent(mayCompact(&t.rules, t.st))
	}
	t.stats.roundTrips.Add(1)
	if !r.ServerTime.IsZero() {
		r.Stepped = t.clock.Observe(sent, recv, r.ServerTime)
	}
	// Another round trip (an Allow's, the worker's) may have seen the step
	// first: this one's sample then agrees with the restarted estimate,
	// while its scores came from the old one.
	r.Stepped = r.Stepped || t.clock.Since(a.ClockGen)
	return r, nil
}

// sampleClock takes up to n samples of the server's clock (TIME), each
// bounded by the Redis timeout, until one comes from a round trip short
// enough (see tightSample). The first round trip of a new client often
// dials its connection, and a process just started is often slow: a second
// sample, on a warm connection, is usually far tighter than the first, and
// every replica's calls are placed by their estimates. It returns the
// error of the first sample; once one is taken, the samples taken stand.
func (t *Throttler) sampleClock(ctx context.Context, n int) error {
	for i := range n {
		sctx, cancel := context.WithTimeout(ctx, t.opt.redisTimeout)
		sent := t.now()
		server, err := t.st.Now(sctx)
		cancel()
		if err != nil {
			if i > 0 {
				return nil
			}
			return err
		}
		t.clock.Observe(sent, t.now(), server)
		if e := t.clock.View().ErrBound(); e <= tightSample || t.rules.Margin(e, 0) == 0 && i > 0 {
			return nil
		}
	}
	return nil
}

// firstSamples bounds the round trips a first sampleClock makes, and tightSample is
// an error bound it stops at at once (µs): a round trip of a millisecond.
// Past the first sample it stops, too, once the estimate needs no margin
// (see internal/core's margin.go).
const (
	firstSamples = 3
	tightSample  = 500
)

// release removes members synchronously, and returns the Redis error if it
// could not; what it cannot remove is given back by the next round trip,
// which a worker makes even in a process that only calls Allow (and the
// members stop counting on their own regardless). at is the score all
// members were admitted at when they were written for sure, else 0 (see
// store.Remove): only then does a compacted one leave its bucket, and
// such members are not given back again after an error when a key may
// be read compacted (see mayCompact; the request may still reach Redis:
// see core.Attempt.Resent).
func (t *Throttler) release(ctx context.Context, members []string, at int64) error {
	if len(members) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.releaseTimeout())
	defer cancel()
	err := t.st.Remove(ctx, members, at)
	switch {
	case err == nil:
	case at > 0 && mayCompact(&t.rules, t.st):
		// Written for sure on a key that may be read compacted: the request may still
		// reach Redis, and a plain removal that went before it would have
		// its script take the members for compacted (see
		// core.Attempt.Resent). They count until they leave the window.
		t.writeLater(err, "members written for sure not given back: they count until they leave the window", nil)
	default:
		t.writeLater(err, "members given back later", func(o *owed) { o.giveBackLater(members) })
	}
	return err
}

// writeLater notes a write Redis did not take: owe adds it to what the
// next round trip that works writes, which a worker makes even in a
// process that only calls Allow; a nil owe writes nothing later (the
// error is counted and logged, then says what became of the write).
func (t *Throttler) writeLater(err error, then string, owe func(*owed)) {
	t.stats.redisError(err)
	t.mu.Lock()
	defer t.mu.Unlock()
	if owe == nil {
		t.stats.logRedis(t.now(), err, then)
		return
	}
	owe(&t.owed)
	t.stats.logRedis(t.now(), err, then)
	t.worker.start(&t.owed)
}

// releaseTimeout bounds how long an abandoned call spends giving its slot
// back, so that cancellation stays prompt when Redis hangs.
func (c *config) releaseTimeout() time.Duration {
	return min(c.opt.redisTimeout, 250*time.Millisecond)
}

// resendable reports whether a round trip that failed with err, after try
// resends, goes again: err is transient (see redisstore.Transient), and
// once a pause before it has passed (none before the first resend, for a
// broken connection is replaced at once; then 2ms, doubling up to 64ms)
// at least that much again is left of ctx's deadline. It sleeps that
// pause.
func resendable(ctx context.Context, err error, try int) bool {
	if !redisstore.Transient(err) {
		return false
	}
	pause := time.Duration(0)
	if try > 0 {
		pause = 2 * time.Millisecond << min(try-1, 5)
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < 2*pause+time.Millisecond {
		return false
	}
	return pause == 0 || sleepCtx(ctx, pause)
}

// mayCompact reports whether a give-back of calls written for sure may
// drop a bucket's count (see core.Attempt.Resent): a window of rules
// compacts, or st reads a key compacted now (another process compacts it).
func mayCompact(rules *core.Rules, st store) bool { return rules.Compacts() || st.Compacted() }
