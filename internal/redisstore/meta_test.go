package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

func testStore(t *testing.T) (*Store, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { c.Close() })
	w := core.Window{Key: "k", Limit: 10, Interval: time.Second, W: time.Second.Microseconds()}
	return NewStore(c, []core.Window{w}, 0, nil, "self"), mr
}

// What WriteMeta encodes, every reader decodes the same, and none of it
// counts as a call.
func TestMetaRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, mr := testStore(t)
	server, err := s.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := server.UnixMicro()
	pause, end := now+5_000_000, now+60_000_000
	w := core.MetaWrite{Pause: pause, Limit: 4, LimitEnd: end, Backoff: 2_000_000, BackoffEnd: now + 2_000_000}
	if err := s.WriteMeta(ctx, w, time.Minute); err != nil {
		t.Fatal(err)
	}
	r, err := s.ReadMeta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Pause != pause || r.Limit != 4 || r.LimitEnd != end {
		t.Errorf("ReadMeta = pause %d, limit %d until %d; want %d, 4 until %d", r.Pause, r.Limit, r.LimitEnd, pause, end)
	}
	c, err := s.ReadCounters(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Limit != 4 || c.LimitEnd != end || c.Backoff != w.Backoff || c.BackoffEnd != w.BackoffEnd {
		t.Errorf("ReadCounters = %+v, want the limit and back-off written (%+v)", c, w)
	}
	if err := s.Add(ctx, []core.Entry{{Score: now, Member: "call"}}); err != nil {
		t.Fatal(err)
	}
	u, err := s.Usage(ctx, func(n int64, m core.Meta) []int { return []int{m.LimitAt(n, 10)} })
	if err != nil {
		t.Fatal(err)
	}
	if u.Meta != (core.Meta{Pause: pause, Limit: 4, LimitEnd: end}) || u.Lims[0] != 4 || u.Used[0] != 1 {
		t.Errorf("Usage = meta %+v, limit %d, used %d; want the meta written, 4, 1 (only the call counts)", u.Meta, u.Lims[0], u.Used[0])
	}
	// An earlier pause never shortens a later one; ClearLimit ends the
	// lowering.
	if err := s.WriteMeta(ctx, core.MetaWrite{Pause: pause - 1_000_000, ClearLimit: true}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if r, err = s.ReadMeta(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Pause != pause || r.Limit != 0 || r.LimitEnd != 0 {
		t.Errorf("after an earlier pause and ClearLimit: pause %d, limit %d until %d; want %d, none", r.Pause, r.Limit, r.LimitEnd, pause)
	}
	if ttl := mr.TTL("k"); ttl < 50*time.Second {
		t.Errorf("key TTL %s, want at least the minute asked for", ttl)
	}
}

func TestMetaScoreValue(t *testing.T) {
	for _, v := range []int64{1, 40, 1_795_500_000_123_456} {
		if got := MetaValue(float64(MetaScore(v))); got != v {
			t.Errorf("MetaValue(MetaScore(%d)) = %d", v, got)
		}
	}
	if got := MetaValue(0); got != 0 { // a missing member
		t.Errorf("MetaValue(0) = %d, want 0", got)
	}
}
