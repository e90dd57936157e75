package redisstore

import (
	"context"
	"sync/atomic"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// compactedKey reads a compacted key (see compact.go): its members and its
// buckets. A round trip that learns no slots counts with ZCOUNTs and the
// copy of its buckets this process keeps (see buckets.go); one that learns
// slots, or recounts, with CountScript, which also reads the tails. It
// holds what this process keeps of the key between round trips.
type compactedKey struct {
	// The copy of its buckets this process counts with (nil: none yet,
	// or it went stale), see buckets.go.
	copy atomic.Pointer[bucketCopy]
	// The bucket width its hash was last found with (at first, its own),
	// which names the fields a copy takes.
	width atomic.Int64
	// Its last compaction moved a whole batch (CompactBatch), so the next
	// round trip compacts again, trimming or not.
	behind atomic.Bool
	// The calls this process added since its last compaction: from
	// core.Window.Keep on, the next round trip compacts, so that a burst
	// leaves at most about Keep members per process behind the newest
	// Keep.
	sinceCompact atomic.Int64
}

// bucketCmds are a compacted window's reads in a round trip: CountScript's,
// or without it (plain) the copy of its buckets it counts with (nil: the
// one taken in this round trip), the stamp read after its counts (in the
// first key's ZMSCORE for the first window, with the probes for theirs),
// and the reads of a new copy; and CompactScript's answer when it ran.
type bucketCmds struct {
	count   *redis.Cmd
	plain   bool
	copied  *bucketCopy
	stamp   *redis.FloatSliceCmd
	take    copyCmds
	compact *redis.Cmd
}

// bucketRound is what a round trip's reads of its compacted windows need
// beside their own commands.
type bucketRound struct {
	// The probes are read by the CountScript of their window, not with
	// the meta members.
	probeCounted bool
	recounting   bool  // every compacted window is read with CountScript
	stampAt      int   // where the meta members' answer holds the first window's stamp
	probeStampAt int   // where the probes' ZMSCORE holds their window's stamp (0: not there)
	again        []int // windows read without CountScript, to read with it (see buckets.go)
}

// bk returns window wi's compacted reads, made on first use.
func (c *attemptCmds) bk(wi int) *bucketCmds {
	if c.win[wi].bk == nil {
		c.win[wi].bk = new(bucketCmds)
	}
	return c.win[wi].bk
}

// copied returns the copy of its buckets window wc counts with in this
// round trip, if any.
func (wc *winCmds) copied() *bucketCopy {
	if wc.bk == nil {
		return nil
	}
	return wc.bk.copied
}

func (*compactedKey) giveBack(ctx context.Context, p redis.Pipeliner, x core.Window, calls []core.Entry) {
	giveBackCmd(ctx, p, x, calls)
}

// beforeAdds queues CompactScript, in a window this process compacts, when
// the attempt trims, the last compaction moved a whole batch, or this
// process added Keep calls since.
func (k *compactedKey) beforeAdds(c *attemptCmds, p redis.Pipeliner, wi int) {
	x := c.s.wins[wi]
	if x.Bucket <= 0 {
		return // another process compacts it
	}
	trim := c.a.Trim.On
	many := x.Keep > 0 && k.sinceCompact.Load() >= x.Keep
	if k.behind.Swap(false) || trim || many {
		k.sinceCompact.Store(0)
		// Its buckets are kept while a window that a check may still
		// count (widened by the widest margin) overlaps them, and as long
		// as the hash and the flag live.
		keep := x.W + core.TrimSlack + core.MaxSpread
		ttl := keep/1000 + 1000 // ms
		c.bk(wi).compact = CompactScript.Eval(c.ctx, p, []string{x.Key, CompactKey(x.Key)}, x.Bucket, x.Age, keep, ttl, BucketMember, CompactBatch, RebuildFrom, x.Keep, StampMember, DenseBucket)
	}
}

func (k *compactedKey) added(x core.Window, n int) {
	if x.Bucket > 0 {
		k.sinceCompact.Add(int64(n))
	}
}

// queueReads queues, without tails, a ZCOUNT per range and the stamp after
// them (see buckets.go; the probes are looked up with the others, in
// queueMeta); else all of it, the probes too, with one CountScript.
func (k *compactedKey) queueReads(c *attemptCmds, p redis.Pipeliner, wi int) {
	s, a, x, b := c.s, c.a, c.s.wins[wi], c.bk(wi)
	w := a.Reach(x)
	if !c.buckets.recounting && a.Learn.Slots == 0 {
		c.win[wi].counts = c.queueCounts(p, x.Key, w)
		if len(a.Checks) == 0 && (wi != s.probeIn || len(c.probes()) == 0) {
			return // nothing to count
		}
		b.plain = true
		if b.compact == nil {
			b.copied = k.copy.Load()
		}
		if b.copied != nil && wi > 0 && wi != s.probeIn {
			// The probes' window reads its stamp with its probes
			// (queueMeta): after them.
			b.stamp = p.ZMScore(c.ctx, x.Key, StampMember, BucketMember)
		}
		return
	}
	var probes []core.Entry
	if wi == s.probeIn {
		probes = c.probes()
		c.buckets.probeCounted = true
	}
	b.count = countCmd(c.ctx, p, x, c.ranges(w), c.spans(wi), probes, c.peakAsk(wi))
}

// peakAsk is what window wi's CountScript reads of the peaks: in exact
// attempts with several limits, as a log's PeakScript (see logKey's
// queueReads), each score's; none otherwise.
func (c *attemptCmds) peakAsk(wi int) peakAsk {
	a := c.a
	if !c.readsPeaks() {
		return peakAsk{}
	}
	ours := make([]int64, len(a.Adds))
	for i, e := range a.Adds {
		ours[i] = e.Score
	}
	return peakAsk{limit: a.Lims[wi], w: a.Reach(c.s.wins[wi]), ours: ours}
}

// queueLast queues the reads that take a new copy of the window's buckets
// when it is read without CountScript and has none, and in a recount: the
// stamp, then the hash.
func (k *compactedKey) queueLast(c *attemptCmds, p redis.Pipeliner, wi int) {
	b := c.bk(wi)
	if !(b.plain && b.copied == nil || c.buckets.recounting) {
		return
	}
	x, width := c.s.wins[wi], k.width.Load()
	ranges := c.ranges(c.a.Reach(x))
	if len(ranges) == 0 {
		// A round trip that only probes: the copy starts where the
		// probe's window would.
		for _, e := range c.probes() {
			ranges = append(ranges, countRange{e.Score - x.W, e.Score + x.W})
		}
	}
	from := copyFrom(ranges, width)
	b.take = copyCmds{stamp: p.ZMScore(c.ctx, x.Key, StampMember, BucketMember),
		fields: p.HMGet(c.ctx, CompactKey(x.Key), copyFields(width, from)...), b: width, from: from}
}

// read reads CountScript's counts, tails and probes, or the counts read
// without it (see countFromCopy).
func (k *compactedKey) read(c *attemptCmds, r *core.Reply, wi int) error {
	a, b := c.a, c.bk(wi)
	if b.compact != nil {
		if v, err := b.compact.Int64Slice(); err == nil && len(v) == 2 && v[1] == 1 {
			k.behind.Store(true)
		}
	}
	if b.count == nil {
		if b.plain {
			k.countFromCopy(c, r, wi)
		} else {
			r.Counts[wi] = intVals(c.win[wi].counts)
		}
		return nil
	}
	probed := c.buckets.probeCounted && wi == c.s.probeIn
	probes := 0
	if probed {
		probes = len(c.probes())
	}
	peaks := c.readsPeaks()
	read, err := readCount(b.count, len(a.Checks), probes, peaks, len(c.spans(wi)))
	if err != nil {
		return err
	}
	r.Counts[wi] = read.counts
	if probed {
		for i, found := range read.probed {
			setGone(r, i, !found)
		}
	}
	if a.Learn.Slots > 0 {
		r.Tails[wi] = read.tails[0]
		rest := read.tails[1:]
		for l, caps := range a.Learn.LowCaps {
			if len(caps) > 0 {
				r.LowTails[l][wi] = rest[0]
				rest = rest[1:]
			}
		}
	}
	if peaks {
		if r.Peaks == nil {
			r.Peaks = make([][]int64, len(c.s.wins))
		}
		r.Peaks[wi] = read.peaks
	}
	return nil
}

// countFromCopy reads into r window wi's counts, read without CountScript
// (see buckets.go): its members' and its buckets', from its copy. A
// window whose copy went stale (another stamp), or could not be taken,
// and a probe found neither in the set nor in the copy's buckets, when the
// copy cannot tell (see bucketCopy.mayHold), go to c.buckets.again, to be
// read with CountScript.
func (k *compactedKey) countFromCopy(c *attemptCmds, r *core.Reply, wi int) {
	a, b := c.a, c.bk(wi)
	r.Counts[wi] = intVals(c.win[wi].counts)
	c.noPeaks(r, wi)
	again := func() { c.buckets.again = append(c.buckets.again, wi) }
	cp := b.copied
	switch {
	case cp == nil:
		if cp = b.take.taken(&k.width); cp == nil {
			again()
			return
		}
		k.copy.Store(cp)
	case c.stampRead(wi) != cp.stamp:
		k.copy.CompareAndSwap(cp, nil)
		again()
		return
	}
	for i, rg := range c.ranges(a.Reach(c.s.wins[wi])) {
		n, ok := cp.count(rg.x, rg.y)
		if !ok {
			// Beyond what the copy holds: the recount takes another.
			k.copy.CompareAndSwap(cp, nil)
			again()
			return
		}
		r.Counts[wi][i] += n
	}
	if wi == c.s.probeIn {
		for i, e := range c.probes() {
			if !isGone(*r, i) {
				continue
			}
			switch held, ok := cp.mayHold(e.Score); {
			case !ok:
				again()
			case held:
				setGone(r, i, false) // compacted
			}
		}
	}
}

// stampRead is the stamp and the flag of compacted window wi this round
// trip read after its counts and its probes (0: missing).
func (c *attemptCmds) stampRead(wi int) [2]float64 {
	at := func(v []float64, i int) float64 {
		if i < len(v) {
			return v[i]
		}
		return 0
	}
	switch {
	case wi == 0:
		v := c.meta.Val()
		return [2]float64{at(v, c.buckets.stampAt), at(v, 6)}
	case wi == c.s.probeIn && c.buckets.probeStampAt > 0:
		v := c.probe.Val()
		return [2]float64{at(v, c.buckets.probeStampAt), at(v, 0)}
	}
	v := c.bk(wi).stamp.Val()
	return [2]float64{at(v, 0), at(v, 1)}
}

// noPeaks sets window wi's peaks to -1 (the count decides) in exact
// attempts with several limits: a compacted window read without
// CountScript reads none.
func (c *attemptCmds) noPeaks(r *core.Reply, wi int) {
	if !c.readsPeaks() {
		return
	}
	if r.Peaks == nil {
		r.Peaks = make([][]int64, len(c.s.wins))
	}
	r.Peaks[wi] = make([]int64, len(c.a.Checks))
	for i := range r.Peaks[wi] {
		r.Peaks[wi][i] = -1
	}
}

// queueUsage counts the calls now and ahead, and reads the next slot under
// lim, with CountScript: the next slot may be a bucket's end.
func (*compactedKey) queueUsage(ctx context.Context, p redis.Pipeliner, x core.Window, now int64, lim int) func() (keyUsage, error) {
	ranges := []countRange{{now - x.W, now + 1}, {now, now + core.FutureBound + 1}}
	count := countCmd(ctx, p, x, ranges, []tailSpan{{lim - 1, lim - 1}}, nil, peakAsk{})
	return func() (keyUsage, error) {
		read, err := readCount(count, 2, 0, false, 1)
		if err != nil {
			return keyUsage{}, err
		}
		return keyUsage{used: int(read.counts[0]), reserved: int(read.counts[1]), nth: read.tails[0]}, nil
	}
}

// recount reads again, with CountScript, the windows of attempt a that its
// round trip found compacted by another process (their flag set), or could
// not read without the script (see countFromCopy), and puts their counts,
// tails and probes into r; from now on they are read as compacted. The
// attempt's members were added before, so the recount, like every count,
// sees whatever any process admitted that could not see them.
func (s *Store) recount(ctx context.Context, a *core.Attempt, late []int, r *core.Reply) error {
	c := &attemptCmds{s: s, a: a, win: make([]winCmds, len(s.wins)), buckets: bucketRound{recounting: true}}
	err := s.bounded(ctx, func(ctx context.Context) error {
		c.ctx = ctx
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, wi := range late {
				s.keys[wi].compacted.Store(true)
				s.form(wi).queueReads(c, p, wi)
			}
			for _, wi := range late {
				s.form(wi).queueLast(c, p, wi)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return err
	}
	for _, wi := range late {
		if err := s.form(wi).read(c, r, wi); err != nil {
			return err
		}
		k := &s.keys[wi].buckets
		if cp := c.bk(wi).take; cp.stamp != nil {
			k.copy.Store(cp.taken(&k.width)) // nil when it could not be taken
		}
	}
	return nil
}
