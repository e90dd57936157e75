package sim

import (
	"sync/atomic"
	"time"
)

// Clock is a replica's local clock: the bubble's virtual clock off by a
// skew that can step mid-run, as NTP steps a wall clock. Its readings keep
// a monotonic reading, but the skew moves it with the wall time (Add does
// both), so durations between readings across a step (Sub) show the step,
// as with a clock handed to WithClock that has no monotonic reading: the
// library must never take a duration on it for one measured in real time.
type Clock struct {
	skew atomic.Int64 // nanoseconds
}

// NewClock returns a clock off by skew.
func NewClock(skew time.Duration) *Clock {
	c := &Clock{}
	c.skew.Store(int64(skew))
	return c
}

// Now reads the clock; pass it to WithClock.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

// Step moves the clock by d.
func (c *Clock) Step(d time.Duration) { c.skew.Add(int64(d)) }

// Skew is how far the clock is off now.
func (c *Clock) Skew() time.Duration { return time.Duration(c.skew.Load()) }
