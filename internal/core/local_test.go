package core

import (
	"testing"
	"time"
)

func TestLocalWindowKeepsToItsShare(t *testing.T) {
	wins := []Window{{Limit: 4, Interval: time.Second}, {Limit: 10, Interval: 10 * time.Second}}
	l := NewLocalWindow(0.5, wins, 0)
	if l.Limit != 2 {
		t.Fatalf("Limit = %d, want the smallest share, 2", l.Limit)
	}
	t0 := time.Unix(1000, 0)
	var taken []time.Time
	for range 6 {
		at := l.Slot(t0, 1)
		l.Take(at, 1)
		taken = append(taken, at)
	}
	// No window of 1s holds more than 2, none of 10s more than 5.
	for i := range taken {
		for _, x := range []struct {
			w time.Duration
			n int
		}{{time.Second, 2}, {10 * time.Second, 5}} {
			in := 0
			for _, u := range taken {
				if !u.Before(taken[i]) && u.Before(taken[i].Add(x.w)) {
					in++
				}
			}
			if in > x.n {
				t.Fatalf("a window of %s from %s holds %d calls, share %d: %v", x.w, taken[i], in, x.n, taken)
			}
		}
	}
	if !l.Holds(taken[5]) {
		t.Fatal("Holds = false while calls count")
	}
	next := l.Slot(t0, 1)
	c := l.Clone()
	l.Take(next, 1)
	if at := c.Slot(t0, 1); !at.Equal(next) {
		t.Fatalf("the clone sees a call taken after it was made: slot %s, want %s", at, next)
	}
	if at := l.Slot(t0, 1); !at.After(next) {
		t.Fatalf("a taken slot %s is offered again: %s", next, at)
	}
	l.Release(next, 1)
	if at := l.Slot(t0, 1); !at.Equal(next) {
		t.Fatalf("after Release the freed slot %s is not offered again: %s", next, at)
	}
	if l.Holds(taken[5].Add(11 * time.Second)) {
		t.Fatal("Holds = true after every call left the longest window")
	}
}
