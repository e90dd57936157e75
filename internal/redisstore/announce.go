package redisstore

import (
	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// queueTaken queues the publication of the slots the attempt claims (see
// core.Known.Announce), after the claims' ZADDs: a process that hears it
// and counts finds them. Claims PlaceScript places are not announced.
func (c *attemptCmds) queueTaken(p redis.Pipeliner) {
	if len(c.a.Taken) == 0 || c.placing {
		return
	}
	p.Publish(c.ctx, NewsChannel(c.s.wins[0].Key), core.News{Taken: c.a.Taken, From: c.s.Name()}.String())
}
