package redisstore

import (
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// A compacted window whose round trip wants no tails is read without
// CountScript, from a copy of part of its hash this process keeps
// (compactedKey.copy): ZCOUNT per range for its members, as any window, and
// the buckets from the copy. The copy stands while the window's stamp
// (StampMember, which every compaction changes) is the one read before it
// was taken: every round trip reads the stamp after its counts, so a copy
// whose stamp it finds unchanged (and the flag, BucketMember, whose score
// a compaction changes too) holds every call moved out of the set by
// then (a give-back or a bucket dropped since only makes the copy count
// more). A round trip that finds another stamp, or ranges the copy does
// not reach, reads the window again with CountScript (a compaction may
// have moved calls after its ZCOUNT). A copy is taken (the stamp, then
// one HMGET, at the end of the pipeline) when there is none, by the round
// trip that compacts, and by the one that found it stale: the hash's
// header and the running totals of CopySpan buckets from where the round
// trip's earliest range starts, named from the width last found in the
// hash (compactedKey.width). The first window reads its stamp in the first key's
// ZMSCORE, the probes' window in the ZMSCORE of its probes (after them:
// a probe missing from the set is told compacted by the copy, see
// mayHold), any
// other in one ZMSCORE of its own, as a log reads its flag. So a
// compacted window costs a round trip the commands of the log, and a
// ZMSCORE and an HMGET per compaction.

// StampMember, in a compacted window's sorted set, is the compaction
// stamp: it changes with every compaction, its score minus the server's
// clock (µs) when the last one ran, or minus one more than the one before
// when that is later. (Its name in Redis predates the Go name.)
const StampMember = "\x00epoch"

// CopySpan is how many buckets' running totals a copy of a compacted
// window's hash holds, from the bucket before the one where the earliest
// range of the round trip that took it starts: the ranges of the round
// trips after it start later, by what time passes until the next
// compaction, which runs at least every half age (an eighth of the window
// at most: 128 buckets).
const CopySpan = 160

// bucketCopy is a copy of part of a compacted window's hash (see
// CompactKey), taken after its compaction stamp was read.
type bucketCopy struct {
	// StampMember's and BucketMember's scores read before it (0: none):
	// the flag's changes too with a compaction (unless the server's clock
	// went back), which a process running a CompactScript without the
	// stamp makes.
	stamp                   [2]float64
	b, lo, hi, n, base, cut int64
	from                    int64   // cum holds the running totals of buckets from, from+1, ...
	cum                     []int64 // where lo <= k < hi
}

// bucketHeader is the fields of a compacted window's hash a copy takes
// first (see CompactKey).
var bucketHeader = []string{"b", "lo", "hi", "n", "base", "cut"}

// copyFields are the fields an HMGET takes a copy with: the header, then
// the running totals of CopySpan buckets of width b from bucket from.
func copyFields(b, from int64) []string {
	f := make([]string, len(bucketHeader), len(bucketHeader)+CopySpan)
	copy(f, bucketHeader)
	if b > 0 {
		for k := from; k < from+CopySpan; k++ {
			f = append(f, strconv.FormatInt(k, 10))
		}
	}
	return f
}

// newBucketCopy reads a copy from the answer vals to copyFields(b, from),
// taken after the stamp read. A hash of another width gives a copy of its
// header only (none of its totals can be told); no hash, a copy without
// buckets. It reports false when a field it needs is missing or malformed.
func newBucketCopy(stamp [2]float64, b, from int64, vals []any) (*bucketCopy, bool) {
	c := &bucketCopy{stamp: stamp, from: from}
	if len(vals) < len(bucketHeader) {
		return nil, false
	}
	if vals[0] == nil {
		return c, true // nothing compacted (or lost): no bucket counts
	}
	num := func(i int) (int64, bool) {
		s, ok := vals[i].(string)
		if !ok {
			return 0, false
		}
		v, err := strconv.ParseInt(s, 10, 64)
		return v, err == nil
	}
	var head [6]int64
	for i := range head {
		v, ok := num(i)
		if !ok {
			return nil, false
		}
		head[i] = v
	}
	c.b, c.lo, c.hi, c.n, c.base, c.cut = head[0], head[1], head[2], head[3], head[4], head[5]
	if c.b <= 0 {
		return nil, false
	}
	if c.b != b {
		return c, true
	}
	c.cum = make([]int64, len(vals)-len(bucketHeader))
	for i := range c.cum {
		if k := from + int64(i); k >= c.lo && k < c.hi {
			v, ok := num(len(bucketHeader) + i)
			if !ok {
				return nil, false
			}
			c.cum[i] = v
		}
	}
	return c, true
}

// upTo is the calls in every bucket up to k, when the copy can tell.
func (c *bucketCopy) upTo(k int64) (int64, bool) {
	switch {
	case k < c.lo:
		return c.base, true
	case k >= c.hi:
		return c.n, true
	case k >= c.from && k-c.from < int64(len(c.cum)):
		return c.cum[k-c.from], true
	}
	return 0, false
}

// count is the calls in every bucket overlapping (x, y), as CountScript
// counts them, when the copy can tell.
func (c *bucketCopy) count(x, y int64) (int64, bool) {
	if c.b == 0 {
		return 0, true // no buckets
	}
	k0, k1 := bucketSpan(x, y, c.b)
	k0, k1 = max(k0, c.lo), min(k1, c.hi)
	if k0 > k1 {
		return 0, true
	}
	upper, ok1 := c.upTo(k1)
	lower, ok2 := c.upTo(k0 - 1)
	return upper - lower, ok1 && ok2
}

// mayHold reports whether a call scored s, missing from the set, may have
// been moved into the copy's buckets, as CountScript tells a probe: it was
// scored before the cut, in a bucket that holds a call or that was dropped
// (a compacted call counts in its bucket while the bucket is kept). A
// bucket the copy does not hold counts as holding one: a recount for it
// would cost a round trip each time a quiet process's newest call, its
// probe, has been compacted. ok is false when the copy cannot tell: a
// score from its cut on (it may have been moved since the copy was
// taken), or a copy of no hash.
func (c *bucketCopy) mayHold(s int64) (held, ok bool) {
	if c.b == 0 || s >= c.cut {
		return false, false
	}
	k := bucketIndex(s, c.b)
	if k < c.lo {
		return true, true
	}
	if n, known := c.count(k*c.b-1, (k+1)*c.b); known {
		return n > 0, true
	}
	return true, true
}

// copyFrom is the first bucket a copy taken for ranges holds, in width b:
// the one before the earliest range's first.
func copyFrom(ranges []countRange, b int64) int64 {
	if b <= 0 || len(ranges) == 0 {
		return 0
	}
	from := ranges[0].x
	for _, r := range ranges[1:] {
		from = min(from, r.x)
	}
	k0, _ := bucketSpan(from, from+1, b)
	return k0 - 1
}

// bucketIndex is the bucket of width b that score s falls in.
func bucketIndex(s, b int64) int64 {
	k := s / b
	if k*b > s {
		k--
	}
	return k
}

// bucketSpan returns the buckets of width b that range (x, y) overlaps,
// k0 to k1 (none when k0 > k1): CountScript's.
func bucketSpan(x, y, b int64) (k0, k1 int64) {
	k0, k1 = bucketIndex(x, b), bucketIndex(y-1, b)
	if (k0+1)*b-1 <= x {
		k0++ // bucket k0 ends at x: none of its calls is in the range
	}
	return k0, k1
}

// copyCmds are the reads that take a copy: the stamp, then the fields.
type copyCmds struct {
	stamp   *redis.FloatSliceCmd // ZMSCORE key stamp bucketed: a missing member is no error
	fields  *redis.SliceCmd
	b, from int64 // the width the fields were named from, and the first bucket
}

// taken returns the copy they read, or nil; w learns the hash's width.
func (r copyCmds) taken(w *atomic.Int64) *bucketCopy {
	stamp, err := r.stamp.Result()
	if err != nil || len(stamp) != 2 {
		return nil
	}
	vals, err := r.fields.Result()
	if err != nil {
		return nil
	}
	c, ok := newBucketCopy([2]float64{stamp[0], stamp[1]}, r.b, r.from, vals)
	if !ok {
		return nil
	}
	if c.b > 0 && c.b != r.b {
		w.Store(c.b)
	}
	return c
}
