package impls

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// seed is a naive, faithful port of the "active throttler" the library was
// designed from (see the background document): per call, a UUID member
// reserved at a far-future score, counted with ZCARD, then either rewritten
// to its real score or given back while the caller sleeps until the oldest
// call in the window leaves it. Every goroutine runs this on its own: no
// coalescing, no queue. Scores are the local clock in milliseconds.
type seed struct {
	rdb *redis.Client
	cfg Config
}

func newSeed(rdb *redis.Client, cfg Config) *seed { return &seed{rdb: rdb, cfg: cfg} }

const oneYear = 365 * 24 * time.Hour

// ms is a time as a score: milliseconds since the epoch, to the microsecond.
func ms(t time.Time) float64 { return float64(t.UnixMicro()) / 1000 }

// durMs is a duration in milliseconds.
func durMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msArg(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func (s *seed) Wait(ctx context.Context) error {
	tag := newUUID()
	interval := durMs(s.cfg.Interval)
	for {
		now := ms(time.Now())
		start := now - interval

		// Pipeline 1: trim, reserve far in the future, count, expire.
		p := s.rdb.Pipeline()
		p.ZRemRangeByScore(ctx, s.cfg.Key, "0", msArg(start-1))
		p.ZAdd(ctx, s.cfg.Key, redis.Z{Score: now + durMs(oneYear), Member: tag})
		card := p.ZCard(ctx, s.cfg.Key)
		p.Expire(ctx, s.cfg.Key, 2*s.cfg.Interval)
		if _, err := p.Exec(ctx); err != nil {
			return err
		}

		if card.Val() > int64(s.cfg.Limit) {
			// Pipeline 2: give the reservation back, find the oldest call.
			p := s.rdb.Pipeline()
			p.ZRem(ctx, s.cfg.Key, tag)
			oldest := p.ZRangeByScoreWithScores(ctx, s.cfg.Key, &redis.ZRangeBy{
				Min: msArg(start), Max: msArg(now), Offset: 0, Count: 1,
			})
			if _, err := p.Exec(ctx); err != nil {
				return err
			}
			wait := s.cfg.Interval
			if zs := oldest.Val(); len(zs) > 0 {
				wait = time.Duration((zs[0].Score + interval - now) * float64(time.Millisecond))
			}
			if err := sleep(ctx, wait); err != nil {
				return err
			}
			continue
		}

		// Admitted: the score becomes the call's time (plus the buffer).
		return s.rdb.ZAdd(ctx, s.cfg.Key, redis.Z{Score: ms(time.Now().Add(s.cfg.Buffer)), Member: tag}).Err()
	}
}

// newUUID returns a random (version 4) UUID as the 36-character string the
// seed design stores as a member.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
