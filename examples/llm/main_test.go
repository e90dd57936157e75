package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/exampleredis"
)

// TestModes runs each mode briefly, a minute lasting a second, and checks
// what the run guarantees, not what it measures (utilization depends on
// the machine: run the example for it): the API never let a window exceed
// a limit; a and b, whose estimates cover every call, got no 429 and no
// call failed; a and c settled their permits, a giving surplus back and c
// adding debt; b settled none.
func TestModes(t *testing.T) {
	newClient, _, stop, err := exampleredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var closers []func() error
	defer func() {
		time.Sleep(300 * time.Millisecond)
		for _, f := range closers {
			f()
		}
	}()
	c := config{speed: 60, minutes: 2, replicas: 3, goroutines: 8, tokens: 10000, requests: 60, unit: 10,
		buffer: 50 * time.Millisecond, ahead: -1, seed: 7, out: io.Discard}
	for _, m := range modes {
		r, err := runMode(context.Background(), c, m, newClient, &closers)
		if err != nil {
			t.Fatalf("mode %s: %v", m.name, err)
		}
		t.Logf("mode %s: %d accepted, %d 429s, %d failed; max %d tokens, %d requests in a window; %.0f tokens/min; settled %d, returned %d, debt %d",
			m.name, r.api.Accepted, r.api.Rejected, r.failed, r.api.MaxTokensInWindow, r.api.MaxRequestsInWindow, r.perMinute, r.settled, r.returned, r.debt)
		if r.api.MaxTokensInWindow > c.tokens || r.api.MaxRequestsInWindow > c.requests {
			t.Errorf("mode %s: a window at the API held %d tokens and %d requests; limits %d, %d", m.name, r.api.MaxTokensInWindow, r.api.MaxRequestsInWindow, c.tokens, c.requests)
		}
		if r.api.Accepted == 0 {
			t.Errorf("mode %s: the API accepted no call", m.name)
		}
		if m.name != "c" && (r.api.Rejected > 0 || r.failed > 0) {
			t.Errorf("mode %s: %d 429s and %d failed calls, want none", m.name, r.api.Rejected, r.failed)
		}
		switch {
		case m.name == "a" && (r.settled == 0 || r.returned == 0 || r.debt != 0):
			t.Errorf("mode a: settled %d permits, returned %d units, added %d of debt; want some settled and returned, no debt", r.settled, r.returned, r.debt)
		case m.name == "b" && r.settled != 0:
			t.Errorf("mode b: settled %d permits, want none", r.settled)
		case m.name == "c" && (r.settled == 0 || r.debt == 0):
			t.Errorf("mode c: settled %d permits, added %d units of debt; want both", r.settled, r.debt)
		}
	}
}
