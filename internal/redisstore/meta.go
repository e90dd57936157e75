package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

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

	// TallyMember counts, as the score -n, the round trips that added
	// calls (or the marker) to the first key with ZADD (each increments it
	// after its adds; PlaceScript's placements do not, see queueTally): a
	// process that finds it below what it read before has found a copy
	// that missed writes, whichever calls they were, even where a
	// compacted window cannot tell its probe's call from another of its
	// bucket (see heal.go).
	TallyMember = "\x00n"

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

	// LimitMember states the lowered first limit (LowerLimit);
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

// WriteMeta writes m, a change to the members that are not calls, to the
// first limit's key in one pipeline: a pause (only ever later), a lowered
// limit and its end, or its removal, a back-off and its end; it keeps the
// key alive at least ttl (never shortening a longer TTL), and publishes
// m.News, when set, after the write.
func (s *Store) WriteMeta(ctx context.Context, m core.MetaWrite, ttl time.Duration) error {
	key := s.wins[0].Key
	var set []redis.Z
	meta := func(member string, v int64) { set = append(set, redis.Z{Score: float64(MetaScore(v)), Member: member}) }
	if m.Limit > 0 {
		meta(LimitMember, m.Limit)
		meta(LimitEndMember, m.LimitEnd)
	}
	if m.Backoff > 0 {
		meta(BackoffMember, m.Backoff)
		meta(BackoffEndMember, m.BackoffEnd)
	}
	return s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if m.Pause > 0 {
				// Negative scores: the lower one is the later pause.
				p.ZAddLT(ctx, key, redis.Z{Score: float64(MetaScore(m.Pause)), Member: PauseMember})
			}
			if len(set) > 0 {
				p.ZAdd(ctx, key, set...)
			}
			if m.ClearLimit {
				p.ZRem(ctx, key, LimitMember, LimitEndMember)
			}
			// Never shorten the TTL another writer set for a longer pause.
			secs := ttl.Round(time.Second) + time.Second
			p.ExpireNX(ctx, key, secs)
			p.ExpireGT(ctx, key, secs)
			if m.News != nil {
				// After the write: a listener that reads the members on
				// hearing it finds them.
				p.Publish(ctx, NewsChannel(key), m.News.String())
			}
			return nil
		})
		return err
	})
}

// ReadMeta reads the pause and the lowered limit, as a round trip does.
func (s *Store) ReadMeta(ctx context.Context) (core.Reply, error) {
	var v []float64
	err := s.bounded(ctx, func(ctx context.Context) (err error) {
		v, err = s.rdb.ZMScore(ctx, s.wins[0].Key, PauseMember, LimitMember, LimitEndMember).Result()
		return err
	})
	if err != nil {
		return core.Reply{}, err
	}
	if len(v) != 3 {
		return core.Reply{}, errors.New("throttler: short ZMSCORE reply")
	}
	return core.Reply{Meta: core.Meta{Pause: MetaValue(v[0]), Limit: MetaValue(v[1]), LimitEnd: MetaValue(v[2])}}, nil
}
