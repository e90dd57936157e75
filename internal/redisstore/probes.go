package redisstore

import (
	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// What lets a round trip tell that Redis lost the window (core.LossChecks,
// the throttler's heal.go): the marker written with the adds, the heal's
// pause before it, and the probes, read with the meta members (or by their
// window's CountScript when it is compacted, see compacted.go).

// probes returns the attempt's probes (see core.LossChecks).
func (c *attemptCmds) probes() []core.Entry {
	ps := c.a.Loss.Probes[:]
	for i, e := range ps {
		if e.Member == "" {
			return ps[:i]
		}
	}
	return ps
}

// withMarker returns zs, the attempt's adds, followed by the marker when
// the attempt writes it.
func (c *attemptCmds) withMarker(zs []redis.Z) []redis.Z {
	if c.a.Loss.Mark {
		zs = append(zs, redis.Z{Score: float64(MetaScore(1)), Member: Marker})
	}
	return zs
}

// queueTally queues the increment of the first key's tally (see
// TallyMember), after the round trip's ZADD to it: the key exists then,
// and the tally never makes one (which, holding nothing else, could be
// left without a TTL). Claims PlaceScript places go without it: their
// windows are read as logs, whose probes are exact.
func (c *attemptCmds) queueTally(p redis.Pipeliner) {
	c.tally = p.ZIncrBy(c.ctx, c.s.wins[0].Key, -1, TallyMember)
}

// The meta members' answer (see Store.metaArgs) holds the tally at
// metaTally, and the probes from metaProbes when they live in the first
// key.
const (
	metaTally  = 7
	metaProbes = 8
)

// queueHealPause queues, in the first key, the heal's pause the attempt
// writes, if any, and its news. Before the marker: a marker present means
// the pause written with it is there too. Every replica listening hears of
// it.
func (c *attemptCmds) queueHealPause(p redis.Pipeliner) {
	pause, key := c.a.Loss.Pause, c.s.wins[0].Key
	if pause <= 0 {
		return
	}
	p.ZAddLT(c.ctx, key, redis.Z{Score: float64(MetaScore(pause)), Member: PauseMember})
	p.Publish(c.ctx, NewsChannel(key), core.News{Pause: pause}.String())
}

// readProbes reads into r whether the marker was missing (score(0)) and,
// unless CountScript read them, whether each probe is gone: from the meta
// members (score(7+i)) when they live in the first key, else from their
// key's ZMSCORE. ZMSCORE answers nil for a missing member, which go-redis
// reads as 0: no member of ours, nor the marker, ever scores exactly 0.
func (c *attemptCmds) readProbes(r *core.Reply, score func(int) float64) {
	r.NoMark = MetaValue(score(0)) == 0
	r.Tally = MetaValue(score(metaTally))
	if c.tally != nil && c.tally.Err() == nil {
		// What the increment found: the read after it may count other
		// processes' increments too.
		r.Tally, r.Tallied = MetaValue(c.tally.Val())-1, true
	}
	if c.buckets.probeCounted {
		return // read by CountScript
	}
	// A probe, a call of ours (see metaArgs), scores its time.
	for i := range c.probes() {
		switch {
		case c.s.probeIn == 0:
			r.Gone[i] = score(metaProbes+i) == 0
		case c.probe != nil:
			v := c.probe.Val()
			r.Gone[i] = len(v) < 2+i || v[1+i] == 0
		}
	}
}

// setGone records whether probe i is gone.
func setGone(r *core.Reply, i int, gone bool) { r.Gone[i] = gone }

// isGone reports whether probe i was found gone.
func isGone(r core.Reply, i int) bool { return r.Gone[i] }
