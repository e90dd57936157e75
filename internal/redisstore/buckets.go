package redisstore

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A compacted window whose round trip wants no tails is read without
// CountScript: ZCOUNT per range for its members, as any window, then one
// HMGET of its hash's header (b, lo, hi, n, base, cut) and, per range, the
// two running totals the range's buckets take, named from the width this
// process last found in the hash (Store.width). A compaction between the
// two reads only moves calls from the set into their buckets, counted
// then twice, never in neither: the count stays an upper bound, and the
// check that admits with it stays exact. A hash found with another width
// (a process with another window or limit set it first) is read again
// with CountScript, and its width is the one used from then on.

// bucketHeader is the fields of a compacted window's hash that every read
// of it takes first (see CompactKey).
var bucketHeader = []string{"b", "lo", "hi", "n", "base", "cut"}

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

// queueBuckets queues the HMGET of the buckets ranges overlap in the hash
// of the compacted window at key, bucket width b.
func queueBuckets(ctx context.Context, p redis.Pipeliner, key string, b int64, ranges []countRange) *redis.SliceCmd {
	fields := make([]string, len(bucketHeader), len(bucketHeader)+2*len(ranges))
	copy(fields, bucketHeader)
	for _, r := range ranges {
		k0, k1 := bucketSpan(r.x, r.y, b)
		fields = append(fields, itoa(k0-1), itoa(k1))
	}
	return p.HMGet(ctx, CompactKey(key), fields...)
}

// bucketRead is what queueBuckets's HMGET answered.
type bucketRead struct {
	ok     bool    // the answer is whole: every total a range wants was there
	counts []int64 // per range: the calls its buckets hold (0 without a hash)
	cut    int64   // every call scored before it may have been compacted
	width  int64   // the hash's bucket width (0: no hash)
}

// readBuckets reads cmd, queued by queueBuckets with width b for ranges.
// An answer with another width, or without a total a range needs, is not
// ok: CountScript reads the window instead.
func readBuckets(cmd *redis.SliceCmd, b int64, ranges []countRange) bucketRead {
	vals, err := cmd.Result()
	if err != nil || len(vals) != len(bucketHeader)+2*len(ranges) {
		return bucketRead{}
	}
	num := func(i int) (int64, bool) {
		s, ok := vals[i].(string)
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	}
	r := bucketRead{counts: make([]int64, len(ranges))}
	width, found := num(0)
	if !found {
		r.ok = vals[0] == nil // no hash: no compacted call
		return r
	}
	r.width = width
	var head [5]int64
	for i := range head {
		v, ok := num(1 + i)
		if !ok {
			return r
		}
		head[i] = v
	}
	lo, hi, n, base, cut := head[0], head[1], head[2], head[3], head[4]
	r.cut = cut
	if width != b {
		return r
	}
	// The running total up to bucket k, whose field is at i when kept.
	cum := func(k int64, i int) (int64, bool) {
		switch {
		case k < lo:
			return base, true
		case k >= hi:
			return n, true
		}
		return num(i)
	}
	for j, rg := range ranges {
		k0, k1 := bucketSpan(rg.x, rg.y, b)
		at := len(bucketHeader) + 2*j // the totals up to k0-1 and k1
		k0 = max(k0, lo)              // cum(lo-1) is base: no field read
		if k0 > min(k1, hi) {
			continue
		}
		upper, ok1 := cum(k1, at+1)
		lower, ok2 := cum(k0-1, at)
		if !ok1 || !ok2 {
			return r
		}
		r.counts[j] = upper - lower
	}
	r.ok = true
	return r
}
