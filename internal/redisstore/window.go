package redisstore

import (
	"context"
	"sync/atomic"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// A keyForm is how a round trip writes and reads one limit's key: as a log
// of its calls, one member each (logKey, below), or compacted, with the
// calls older than an age moved into the buckets of a hash (compactedKey,
// compacted.go). The Store keeps one per key (keyState) and reads a key as
// compacted, for good, from the moment it compacts it (core.Window.Bucket)
// or a round trip finds its flag (BucketMember: another process does).
// The round trip sequences the keys' writes and reads, and the meta reads
// after them, the same way for both (see Store.Reserve).
type keyForm interface {
	// giveBack queues the removal of calls written for sure from key x.
	giveBack(ctx context.Context, p redis.Pipeliner, x core.Window, calls []core.Entry)
	// beforeAdds queues the writes to window wi's key that go after the
	// give-backs and before the trim and the round's adds.
	beforeAdds(c *attemptCmds, p redis.Pipeliner, wi int)
	// added notes that the round trip adds n calls to window x's key.
	added(x core.Window, n int)
	// queueReads queues the reads of window wi's counts (and tails, when
	// the attempt learns slots), after its writes.
	queueReads(c *attemptCmds, p redis.Pipeliner, wi int)
	// queueLast queues the reads of window wi that go at the end of the
	// pipeline, after the meta reads.
	queueLast(c *attemptCmds, p redis.Pipeliner, wi int)
	// read reads into r what queueReads and queueLast queued.
	read(c *attemptCmds, r *core.Reply, wi int) error
	// queueUsage queues Usage's reads of window x's key at the server's
	// now, under lim, and returns what reads their answers.
	queueUsage(ctx context.Context, p redis.Pipeliner, x core.Window, now int64, lim int) func() (keyUsage, error)
}

// keyState is what the Store keeps of one limit's key between round trips.
type keyState struct {
	compacted atomic.Bool // read with its buckets (see keyForm)
	buckets   compactedKey
}

// Compacted reports whether some limit's key is read with its buckets
// now: this process compacts it, or found another's compaction there. A
// give-back of calls written for sure may then drop a bucket's count
// (GiveBackScript), and must not be sent twice, nor after a plain removal
// of the same calls (see core.Attempt.Resent).
func (s *Store) Compacted() bool {
	for i := range s.keys {
		if s.keys[i].compacted.Load() {
			return true
		}
	}
	return false
}

// form returns how the key of window wi is read now.
func (s *Store) form(wi int) keyForm {
	if k := &s.keys[wi]; k.compacted.Load() {
		return &k.buckets
	}
	return logKey{}
}

// keyUsage is what Usage reads of one key: the calls counting now, those
// reserved ahead, and the member whose leaving frees the next slot.
type keyUsage struct {
	used, reserved int
	nth            []core.Entry
}

// logKey reads a key as the log of its calls: a count is a ZCOUNT, the
// next free slots are the members a ZRANGE reads under the limit.
type logKey struct{}

func (logKey) giveBack(ctx context.Context, p redis.Pipeliner, x core.Window, calls []core.Entry) {
	p.ZRem(ctx, x.Key, entryMembers(calls)...)
}

func (logKey) beforeAdds(*attemptCmds, redis.Pipeliner, int) {}

func (logKey) added(core.Window, int) {}

// queueReads queues, per checked score g, the count of the members in
// (g-w, g+w), with w the window widened by the margin (see core.Attempt.Reach; the peak script
// instead, for exact attempts with several limits; nothing when
// PlaceScript counts), then, when the attempt learns slots, the tails
// under the limit in force and under each capped priority's cap, and the
// flag.
func (logKey) queueReads(c *attemptCmds, p redis.Pipeliner, wi int) {
	s, a, x, wc := c.s, c.a, c.s.wins[wi], &c.win[wi]
	w := a.Reach(x)
	// TenantPeakScript removes the capped tenants' claims it refuses: the
	// tails are read before it, so that they hold them, as the counts do
	// (core.Resolve drops every claim not admitted from the tails).
	tailsFirst := wi == 0 && !c.placing && c.readsPeaks() && c.capsRead()
	if tailsFirst {
		logKey{}.queueTails(c, p, wi)
	}
	switch {
	case c.placing:
		// Counted by PlaceScript.
	case c.readsPeaks():
		wc.peak = c.peakCmd(p, wi, w, a.Lims[wi])
	default:
		wc.counts = c.queueCounts(p, x.Key, w)
	}
	if !tailsFirst {
		logKey{}.queueTails(c, p, wi)
	}
	if wi > 0 && wi != s.probeIn {
		// After the counts: a compaction that moved calls before they
		// counted wrote the flag before this reads it.
		wc.flag = p.ZMScore(c.ctx, x.Key, BucketMember)
	}
}

func (logKey) queueLast(*attemptCmds, redis.Pipeliner, int) {}

// queueTails queues the reads of window wi's tails, when the attempt
// learns slots.
func (logKey) queueTails(c *attemptCmds, p redis.Pipeliner, wi int) {
	a, x, wc := c.a, c.s.wins[wi], &c.win[wi]
	if a.Learn.Slots == 0 {
		return
	}
	wc.tails = c.tail(p, x.Key, a.Lims[wi])
	for l, caps := range a.Learn.LowCaps {
		if len(caps) > 0 {
			wc.lowTails[l] = c.tail(p, x.Key, caps[wi])
		}
	}
}

// read reads the counts (and peaks) and the tails.
func (logKey) read(c *attemptCmds, r *core.Reply, wi int) error {
	a, wc := c.a, &c.win[wi]
	if wc.peak != nil {
		counts, peaks, err := readPeaks(wc.peak, len(a.Checks), c.tenantLists(wi))
		if err != nil {
			return err
		}
		r.Counts[wi] = counts
		if r.Peaks == nil {
			r.Peaks = make([][]int64, len(c.s.wins))
		}
		r.Peaks[wi] = peaks
	} else {
		r.Counts[wi] = intVals(wc.counts)
	}
	if wc.tails != nil {
		r.Tails[wi] = zEntries(wc.tails.Val())
		for l, tail := range wc.lowTails {
			if tail != nil {
				r.LowTails[l][wi] = zEntries(tail.Val())
			}
		}
	}
	return nil
}

func (logKey) queueUsage(ctx context.Context, p redis.Pipeliner, x core.Window, now int64, lim int) func() (keyUsage, error) {
	used := p.ZCount(ctx, x.Key, exclusive(now-x.W), itoa(now))
	resv := p.ZCount(ctx, x.Key, exclusive(now), itoa(now+core.FutureBound))
	nth := p.ZRangeWithScores(ctx, x.Key, int64(-lim), int64(-lim))
	return func() (keyUsage, error) {
		return keyUsage{used: int(used.Val()), reserved: int(resv.Val()), nth: zEntries(nth.Val())}, nil
	}
}

// queueCounts queues, per checked score g, the count of key's members in
// (g-w, g+w).
func (c *attemptCmds) queueCounts(p redis.Pipeliner, key string, w int64) []*redis.IntCmd {
	counts := make([]*redis.IntCmd, 0, len(c.a.Checks))
	for _, g := range c.a.Checks {
		counts = append(counts, p.ZCount(c.ctx, key, exclusive(g-w), exclusive(g+w)))
	}
	return counts
}

// intVals returns the counts' answers.
func intVals(cmds []*redis.IntCmd) []int64 {
	v := make([]int64, len(cmds))
	for i, cmd := range cmds {
		v[i] = cmd.Val()
	}
	return v
}
