package redisstore

import (
	"context"
	"strings"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// Usage reads every limit's window without changing it, in two MULTI
// round trips bounded together by ctx: the server's clock, the pause,
// limit and limit-end members and every key's flag (BucketMember) first,
// from which limits gives the limits in force; then, per key, the members
// counting now, those among them that are debt, those scored after now (up
// to core.FutureBound past it), and the member whose leaving frees the next
// slot under the limit in force. A compacted window counts its buckets
// too (CountScript), and its next slot may be a bucket's end; its debt
// counts only the calls not compacted yet.
func (s *Store) Usage(ctx context.Context, limits func(now int64, m core.Meta) []int) (core.UsageRead, error) {
	var (
		u     core.UsageRead
		debt  = make([]*redis.StringSliceCmd, len(s.wins))
		reads = make([]func() (keyUsage, error), len(s.wins))
	)
	err := s.bounded(ctx, func(ctx context.Context) error {
		now, err := s.usageMeta(ctx, limits, &u)
		if err != nil {
			return err
		}
		// A second round trip, now that the server's clock and the limit in
		// force are known: what it counts is consistent within each key.
		_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for i, x := range s.wins {
				debt[i] = p.ZRangeByScore(ctx, x.Key, &redis.ZRangeBy{Min: exclusive(now - x.W), Max: itoa(now)})
				reads[i] = s.form(i).queueUsage(ctx, p, x, now, u.Lims[i])
			}
			return nil
		})
		return err
	})
	if err != nil {
		return core.UsageRead{}, err
	}
	for i := range s.wins {
		d := 0
		for _, m := range debt[i].Val() {
			if strings.HasPrefix(m, core.DebtPrefix) {
				d++
			}
		}
		k, err := reads[i]()
		if err != nil {
			return core.UsageRead{}, err
		}
		u.Debt = append(u.Debt, d)
		u.Used = append(u.Used, k.used)
		u.Reserved = append(u.Reserved, k.reserved)
		u.Nth = append(u.Nth, k.nth)
	}
	return u, nil
}

// usageMeta reads, in one MULTI round trip, the server's clock, the pause,
// limit and limit-end members and every key's flag (BucketMember) into u,
// with the limits in force, and returns the server's now (µs). A key whose
// flag is set is read as compacted from now on.
func (s *Store) usageMeta(ctx context.Context, limits func(now int64, m core.Meta) []int, u *core.UsageRead) (int64, error) {
	var (
		clock *redis.TimeCmd
		meta  *redis.FloatSliceCmd
		flags = make([]*redis.FloatSliceCmd, len(s.wins))
	)
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		clock = p.Time(ctx)
		meta = p.ZMScore(ctx, s.wins[0].Key, PauseMember, LimitMember, LimitEndMember)
		for i, x := range s.wins {
			flags[i] = p.ZMScore(ctx, x.Key, BucketMember)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for i := range s.wins {
		if v := flags[i].Val(); len(v) == 1 && MetaValue(v[0]) > 0 {
			s.keys[i].compacted.Store(true)
		}
	}
	u.Server = clock.Val()
	now := u.Server.UnixMicro()
	u.Meta = decodeMeta(meta.Val())
	u.Lims = limits(now, u.Meta)
	return now, nil
}
