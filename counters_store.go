package throttler

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Members of the first limit's key that are not calls (see limits.go),
// written when a Transport backs off from a refusal that states no end:
// backoffMember's score is minus the back-off's length, backoffEndMember's
// minus its end, in server microseconds. Every replica reads them before
// it backs off, so that the back-off grows across replicas.
const (
	backoffMember    = "\x00backoff"
	backoffEndMember = "\x00backoff-end"
)

// countersRead is what a Transport reads of the shared window before it
// follows an API's counter or backs off, in one round trip.
type countersRead struct {
	used                int   // units scored within the range asked for, in the first key
	limit, limitEnd     int64 // the lowered first limit and its end (server µs); 0 = none
	backoff, backoffEnd int64 // the last back-off's length and end (server µs); 0 = none
}

// countersReader is the part of a store that reads for Counters; the Redis
// store has it. A store without it (a test's wrapper) follows no counter
// but still pauses.
type countersReader interface {
	readCounters(ctx context.Context, from, to int64) (countersRead, error)
}

// readCounters counts the members of the first key scored in (from, to]
// and reads the lowered limit and the last back-off.
func (s *redisStore) readCounters(ctx context.Context, from, to int64) (countersRead, error) {
	var (
		used *redis.IntCmd
		meta *redis.FloatSliceCmd
	)
	err := s.bounded(ctx, func(ctx context.Context) error {
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if to > from {
				used = p.ZCount(ctx, s.wins[0].key, exclusive(from), itoa(to))
			}
			meta = p.ZMScore(ctx, s.wins[0].key, limitMember, limitEndMember, backoffMember, backoffEndMember)
			return nil
		})
		return err
	})
	if err != nil {
		return countersRead{}, err
	}
	var r countersRead
	if used != nil {
		r.used = int(used.Val())
	}
	m := meta.Val()
	if len(m) != 4 {
		return countersRead{}, errors.New("throttler: short ZMSCORE reply")
	}
	r.limit, r.limitEnd, r.backoff, r.backoffEnd = -int64(m[0]), -int64(m[1]), -int64(m[2]), -int64(m[3])
	return r, nil
}
