package redisstore

import "github.com/go-throttler/throttler/internal/core"

// The members of the first limit's sorted set that are not calls. Their
// scores are negative, where no window counts them and no trim reaches
// them; each states a value v as the score -v (see MetaScore, MetaValue).
// Every reservation reads the pause, the lowered limit and the margin with
// the same ZMSCORE that checks the marker, so they cost no extra command.
const (
	// Marker sits at score -1: how a process tells a window Redis lost
	// from a key that expired (see heal.go). Every first key holds it: a
	// name of two bytes takes 6 in a small key, where "\x00throttler" took
	// 14.
	Marker = "\x00m"

	// KeeperMember sits at score -1 in the key of every limit after the
	// first, written with each of its TTL refreshes: no trim or give-back
	// removes it, so such a key, which holds no marker, is never emptied,
	// which would delete it with its TTL, for a round trip that does not
	// refresh the TTL to create it again without one, to live for ever.
	// It goes when the key expires.
	KeeperMember = "\x00k"

	// PauseMember states the server time (µs) before which no call may go
	// (PauseUntil).
	PauseMember = "\x00pause"

	// LimitMember states the lowered first limit (SetLimit);
	// LimitEndMember the server time (µs) at which the lowering ends.
	LimitMember    = "\x00limit"
	LimitEndMember = "\x00limit-end"

	// WideMember states the largest margin in force (µs); WideEndMember
	// the server time at which it ends (see internal/core's margin.go).
	WideMember    = "\x00wide"
	WideEndMember = "\x00wide-end"

	// BackoffMember states the length of the last back-off from a refusal
	// that gave no end (µs), BackoffEndMember its end: every replica reads
	// them before it backs off, so that the back-off grows across replicas
	// (see Transport.Backoff).
	BackoffMember    = "\x00backoff"
	BackoffEndMember = "\x00backoff-end"

	// gradualBucketMember and gradualLimitMember, suffixed with k, state a
	// gradual counter's lowest implied limit in the k-th part of its
	// interval: the part's index and the limit (see CounterScript).
	gradualBucketMember = "\x00gb"
	gradualLimitMember  = "\x00gn"
)

// MetaScore is the score a meta member stating v gets.
func MetaScore(v int64) int64 { return -v }

// MetaValue is the value a meta member's score states: 0 for a member
// that is missing (ZMSCORE's nil, which go-redis reads as 0) or states
// nothing positive.
func MetaValue(score float64) int64 { return max(0, -int64(score)) }

// decodeMeta decodes the ZMSCORE of the pause, limit and limit-end
// members.
func decodeMeta(scores []float64) core.Meta {
	var m core.Meta
	if len(scores) == 3 {
		m.Pause, m.Limit, m.LimitEnd = MetaValue(scores[0]), MetaValue(scores[1]), MetaValue(scores[2])
	}
	return m
}
