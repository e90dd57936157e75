package core

import (
	"testing"
	"time"
)

func TestClockEstimate(t *testing.T) {
	origin := time.Unix(0, 0)
	c := NewClock(origin)
	at := func(ms int) time.Time { return origin.Add(time.Duration(ms) * time.Millisecond) }
	// The server runs 10s ahead; a 2ms round trip.
	c.Observe(at(0), at(2), at(10_001))
	if got := c.Server(at(100)); got != at(10_100).UnixMicro() {
		t.Fatalf("server(100ms) = %d, want %d", got, at(10_100).UnixMicro())
	}
	// A sample that agrees keeps the estimate.
	if stepped := c.Observe(at(200), at(201), at(10_200)); stepped {
		t.Fatal("an agreeing sample was taken for a step")
	}
	// The local clock steps 5s ahead: the next sample restarts the estimate.
	gen := c.View().Gen
	if stepped := c.Observe(at(5_300), at(5_302), at(10_301)); !stepped || !c.Since(gen) {
		t.Fatal("a 5s step was not seen")
	}
	if got := c.Server(at(5_400)); got != at(10_400).UnixMicro() {
		t.Fatalf("after the step, server(5.4s) = %d, want %d", got, at(10_400).UnixMicro())
	}
}

// A round trip the local clock stepped back during was received before it
// was sent: its sample bounds nothing, so it restarts nothing from itself;
// the estimate starts over from the next sample, and what was planned with
// it is distrusted (simulation seed 153: an estimate restarted from such a
// sample kept the pre-step offset, and a heal pause ended before it began).
func TestClockSampleAcrossBackwardStep(t *testing.T) {
	origin := time.Unix(0, 0)
	c := NewClock(origin)
	at := func(ms int) time.Time { return origin.Add(time.Duration(ms) * time.Millisecond) }
	c.Observe(at(0), at(1), at(0))
	gen := c.View().Gen
	if stepped := c.Observe(at(500), at(390), at(501)); !stepped || !c.Since(gen) {
		t.Fatal("a sample received before it was sent was not taken for a step")
	}
	if c.Synced() {
		t.Fatal("the estimate still counts as synced after a sample that bounds nothing")
	}
	c.Observe(at(400), at(401), at(511))
	if got := c.Server(at(400)); got < at(510).UnixMicro() || got > at(511).UnixMicro() {
		t.Fatalf("after the next sample, server(400ms) = %d, want about %d", got, at(510).UnixMicro())
	}
}

// ServerByRuntime converts on the runtime's clock from the last sample: a
// step of the local clock since that sample changes nothing (the scores of
// FallbackLocal's write-backs; simulation seeds 1307 and 1907).
func TestServerByRuntimeIgnoresLocalSteps(t *testing.T) {
	now := time.Now()
	c := NewClock(now)
	server := now.Add(5 * time.Second) // the server's clock runs 5s ahead
	c.Observe(now, now.Add(2*time.Millisecond), server.Add(time.Millisecond))
	want := c.Server(now.Add(2*time.Millisecond)) + (2 * time.Second).Microseconds()
	stepped := now.Add(2*time.Second + 3*time.Second) // the local clock, stepped 3s ahead
	got := c.ServerByRuntime(time.Now().Add(2*time.Second), stepped)
	if d := got - want; d < -50_000 || d > 50_000 {
		t.Fatalf("serverByRuntime 2s after the sample: %dµs off, want within 50ms (the local step of 3s ignored)", d)
	}
	if by := c.Server(stepped); by-want < 2_900_000 {
		t.Fatalf("the local clock's conversion did not see the step either (%dµs): the test proves nothing", by-want)
	}
}
