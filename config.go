package throttler

import (
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// config is what New was given, checked, and what follows from it: the
// options, and the limits and settings rounds are planned by (core.Rules,
// which derives the timings from them), and the hooks tests set before a
// Throttler's first use. It never changes after that, so it is read
// without the Throttler's mutex.
type config struct {
	rules core.Rules // what rounds are planned and resolved by
	opt   options
	hooks testHooks // set by tests before a Throttler's first use
}

// now reads the local clock (WithClock's, or time.Now).
func (c *config) now() time.Time { return c.opt.now() }

// newConfig checks New's arguments and options, and returns the
// configuration they make, or an error wrapping ErrInvalidArgument.
func newConfig(key string, limit int, interval time.Duration, opts []Option) (config, error) {
	if err := checkWindow("New", key, limit, interval); err != nil {
		return config{}, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			return config{}, invalidf("New(%q): nil Option", key)
		}
		if err := opt(&o); err != nil {
			return config{}, err
		}
	}
	if err := checkShares(o.order.shares); err != nil {
		return config{}, err
	}
	if o.buffer > interval*10 && o.buffer > time.Minute {
		return config{}, invalidf("New(%q): buffer %s dwarfs the interval %s", key, o.buffer, interval)
	}
	if o.ahead < 0 {
		o.ahead = min(interval, time.Second)
	}
	wins, err := windows(key, limit, interval, o)
	if err != nil {
		return config{}, err
	}
	c := config{opt: o, rules: core.Rules{Wins: wins, MinLimit: limit, MaxBatch: o.maxBatch, Ahead: o.ahead, Buffer: o.buffer, Shares: o.order.shares}}
	for _, x := range wins[1:] {
		c.rules.MinLimit = min(c.rules.MinLimit, x.Limit)
	}
	return c, nil
}

// windows returns the limits every call counts against, New's first, each
// with its window and compaction, and checks their keys and WithInFlight's:
// one Redis Cluster slot, no key twice.
func windows(key string, limit int, interval time.Duration, o options) ([]core.Window, error) {
	wins := append([]core.Window{{Key: key, Limit: limit, Interval: interval}}, o.limits.extra...)
	if o.limits.pace > 0 {
		pace, err := paceWindow(wins[0], o.limits.pace)
		if err != nil {
			return nil, err
		}
		wins = append(wins, pace)
	}
	for i := range wins {
		wins[i].W = core.WindowMicros(wins[i].Interval + o.buffer)
		wins[i].Bucket, wins[i].Age = core.Compaction(wins[i].Limit, wins[i].W, o.compact.from, o.compact.buckets)
		if wins[i].Bucket > 0 {
			wins[i].Keep = int64(o.compact.keep)
		}
		if err := sameSlot(wins[0].Key, wins[i].Key); err != nil {
			return nil, err
		}
		for _, x := range wins[:i] {
			if x.Key == wins[i].Key {
				return nil, invalidf("New(%q): key %q holds two limits", key, x.Key)
			}
		}
	}
	if o.inflight != nil {
		if err := sameSlot(wins[0].Key, o.inflight.Key); err != nil {
			return nil, err
		}
		for _, x := range wins {
			if x.Key == o.inflight.Key {
				return nil, invalidf("New(%q): WithInFlight's key %q also holds a limit", key, x.Key)
			}
		}
	}
	return wins, nil
}
