package throttler

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Result is the outcome of Allow and AllowN.
type Result struct {
	// Allowed reports whether the call was admitted and counted.
	Allowed bool
	// Remaining is how many more calls the window around now had room for
	// right after this decision.
	Remaining int
	// RetryAfter is, when Allowed is false, how long until the requested
	// calls would have fitted had nobody else taken the room; zero when
	// Allowed. It is a hint, not a reservation.
	RetryAfter time.Duration
}

// Allow makes one attempt to admit one call now and never waits for quota.
// It is AllowN(ctx, 1).
func (t *Throttler) Allow(ctx context.Context) (Result, error) {
	return t.AllowN(ctx, 1)
}

// AllowN makes one attempt to admit n calls now (1 <= n <= limit). When
// Allowed is true, the calls are counted. When it is false, nothing is
// counted: the attempt's members are removed before AllowN returns.
//
// AllowN does not queue behind callers blocked in Wait on this Throttler.
// It costs one Redis round trip when admitted, two when refused. On a Redis
// failure it follows the failure policy: FailOpen allows, FallbackLocal
// decides from the local window, FailClosed returns an error wrapping
// ErrRedis.
func (t *Throttler) AllowN(ctx context.Context, n int) (Result, error) {
	if n < 1 || n > t.minLimit {
		return Result{}, invalidf("AllowN(%d): n must be in 1..%d", n, t.minLimit)
	}
	if ctx.Err() != nil {
		return Result{}, ctxError(ctx)
	}
	if !t.clock.synced() {
		if err := t.syncClock(ctx); err != nil {
			t.observeRedisError(err)
			return t.allowDegraded(n, err)
		}
	}
	now := t.now()
	serverNow, gen := t.clock.serverGen(now)
	g := serverNow + t.clock.roundTrip()
	t.mu.Lock()
	// Refusals that need no round trip; t.mu is held.
	refuse := func(until time.Time) (Result, error) {
		t.mu.Unlock()
		t.stats.refused.Add(1)
		return Result{RetryAfter: until.Sub(now)}, nil
	}
	lims := t.limitsLocked(serverNow, nil)
	if n > lims[0] {
		t.mu.Unlock()
		return Result{}, invalidf("AllowN(%d): more calls at once than the limit, lowered to %d", n, lims[0])
	}
	// A shared pause, a heal's included (see heal.go).
	if t.pausedTill > g {
		return refuse(t.clock.local(t.pausedTill))
	}
	var localAt time.Time
	if now.Before(t.shareUntil) && t.local != nil {
		// Just back from the fallback: also within this process's share.
		if n > t.local.limit {
			return refuse(t.shareUntil)
		}
		if localAt = t.local.slot(now, n); localAt.After(now) {
			return refuse(localAt)
		}
		t.local.take(localAt, n)
	}
	a := &attempt{checks: []int64{g}, lims: lims, slots: min(slices.Min(lims), n),
		exact: true, clock: true, expire: true, ttl0: t.ttl(t.wins[0]), clockGen: gen}
	a.trim = now.Sub(t.lastTrim) >= t.trimEvery()
	// A process that only calls Allow notices a lost window too.
	t.lossChecksLocked(a, serverNow)
	t.mu.Unlock()
	members := make([]string, n)
	for i := range members {
		members[i] = t.ids.next()
		a.adds = append(a.adds, entry{score: g, member: members[i]})
	}
	r, err := t.exec(ctx, a)
	if err != nil {
		// Redis failed: the members, if they arrived, go with the next round
		// trip that works (and stop counting on their own regardless).
		t.mu.Lock()
		t.giveBack = append(t.giveBack, members...)
		t.writeMark = t.writeMark || a.mark // it may not have arrived
		if !localAt.IsZero() {
			t.local.release(localAt, n) // allowDegraded takes it again
		}
		t.mu.Unlock()
		return t.allowDegraded(n, err)
	}
	t.mu.Lock()
	t.upkeptLocked(a, now)
	t.recovered()
	t.learnMetaLocked(r)
	lost := t.noticeLossLocked(a, r, t.now())
	pausedTill := t.pausedTill
	lims = t.limitsLocked(serverNow, nil) // what the reply said is in force
	// The calls go now: a reply that came back more than half the buffer
	// after the score they were counted at would spend the margin the
	// buffer keeps for the network, as a Wait woken late would (see
	// await). (Seed 310: a reply delayed 10.7ms with a 4ms buffer.)
	late := t.opt.buffer > 0 && t.now().Sub(t.clock.local(g)) > t.opt.buffer/2
	ok := t.decide(a, lims, r, []claim{{score: g, n: n}}, nil)[0] && g >= pausedTill && !r.stepped && !lost && !late
	if ok {
		t.journal.add(g, members)
	}
	t.startWorkerLocked() // a heal pause to write, say
	t.mu.Unlock()
	// Remaining: the room left under the tightest limit.
	remaining := t.limit
	for wi, counts := range r.counts {
		others := int(counts[0]) - n
		left := lims[wi] - others
		if ok {
			left -= n
		}
		remaining = min(remaining, max(0, left))
	}
	if ok {
		if t.onAdmit != nil {
			t.mu.Lock()
			t.onAdmit(g, members)
			t.mu.Unlock()
		}
		t.observeAllowed(n)
		return Result{Allowed: true, Remaining: remaining}, nil
	}
	t.release(ctx, members)
	t.stats.refused.Add(1)
	if !localAt.IsZero() {
		t.mu.Lock()
		t.local.release(localAt, n)
		t.mu.Unlock()
	}
	res := Result{Remaining: remaining}
	if slots := t.upcoming(a, r, a.adds, n); len(slots) >= n && slots[n-1] > g {
		res.RetryAfter = t.clock.local(slots[n-1]).Sub(now)
	}
	if pausedTill > g {
		res.RetryAfter = max(res.RetryAfter, t.clock.local(pausedTill).Sub(now))
	}
	return res, nil
}

// allowDegraded answers AllowN by the failure policy.
func (t *Throttler) allowDegraded(n int, err error) (Result, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Calls admitted locally, and members to give back, are for a worker
	// to write once Redis answers.
	defer t.startWorkerLocked()
	now := t.now()
	switch t.opt.policy.kind {
	case policyOpen:
		t.logRedis(err, "calls admitted without throttling")
		t.degradeLocked(now)
		t.observeAllowed(n)
		return Result{Allowed: true}, nil
	case policyLocal:
		t.logRedis(err, "calls throttled locally")
		t.degradeLocked(now)
		if n > t.local.limit {
			return Result{}, redisError(err)
		}
		at := t.local.slot(now, n)
		if at.After(now) {
			return Result{RetryAfter: at.Sub(now)}, nil
		}
		t.local.take(at, n)
		if !errors.Is(err, redis.ErrClosed) { // a closed client will never write them
			serverAt := t.clock.server(at)
			for range n {
				t.replay = append(t.replay, entry{score: serverAt, member: t.ids.next()})
			}
		}
		t.observeAllowed(n)
		return Result{Allowed: true}, nil
	default:
		t.logRedis(err, "calls fail")
		t.stats.failed.Add(1)
		return Result{}, redisError(err)
	}
}
