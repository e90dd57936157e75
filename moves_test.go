package throttler

import (
	"fmt"
	"sync"
	"testing"
)

// Every stand, every move: the table lists each stand, moveLocked reports
// exactly the moves it does not list, puts the waiter where the move says,
// and wakes the caller only on a move to a state it waits for that leaves
// its presence as it was.
func TestWaiterMoves(t *testing.T) {
	var stands []stand
	for s := stQueued; s <= stRefused; s++ {
		for p := present; p <= gone; p++ {
			stands = append(stands, stand{s, p})
		}
	}
	for _, st := range stands {
		if _, listed := moves[st]; !listed {
			t.Errorf("stand %v is not in the table", st)
		}
	}
	if len(moves) != len(stands) {
		t.Errorf("the table lists %d stands, there are %d", len(moves), len(stands))
	}
	old := badMove
	defer func() { badMove = old }()
	allowed := 0
	for _, from := range stands {
		for _, to := range stands {
			var reported bool
			badMove = func(f, t stand) { reported = f == from && t == to }
			w := &waiter{wake: make(chan struct{}, 1), res: reservation{state: from.state}, caller: from.caller}
			w.moveLocked(reservation{state: to.state}, to.caller)
			ok := allowedMove(from, to)
			if ok {
				allowed++
			}
			if reported == ok {
				t.Errorf("%v -> %v: allowed %v, reported %v", from, to, ok, reported)
			}
			if got := (stand{w.res.state, w.caller}); got != to {
				t.Errorf("%v -> %v: the waiter stands at %v", from, to, got)
			}
			waited := to.state == stAdmitted || to.state == stFailed || to.state == stRefused
			woken := len(w.wake) == 1
			if want := waited && from.caller == to.caller; woken != want {
				t.Errorf("%v -> %v: woken %v, want %v", from, to, woken, want)
			}
		}
	}
	// Terminal stands have no move; every other has one at least.
	for _, st := range stands {
		terminal := st.caller == gone && st.state != stInFlight && st.state != stQueued || st == (stand{stQueued, gone})
		if n := len(moves[st]); terminal && n > 0 {
			t.Errorf("%v: a caller gone with its reservation settled moves again (%v)", st, moves[st])
		}
	}
	listed := 0
	for _, to := range moves {
		listed += len(to)
	}
	if allowed != listed {
		t.Errorf("%d moves allowed, the table lists %d: one is listed twice", allowed, listed)
	}
}

func (s stand) String() string {
	states := [...]string{"queued", "in flight", "admitted", "failed", "refused"}
	callers := [...]string{"present", "leaving", "gone"}
	return fmt.Sprintf("%s/%s", states[s.state], callers[s.caller])
}

// illegalMoves are the moves the table does not allow that any test of the
// package made (see TestMain).
var illegalMoves struct {
	sync.Mutex
	seen map[string]int
}

func init() {
	badMove = func(from, to stand) {
		illegalMoves.Lock()
		defer illegalMoves.Unlock()
		if illegalMoves.seen == nil {
			illegalMoves.seen = map[string]int{}
		}
		illegalMoves.seen[fmt.Sprintf("%v -> %v", from, to)]++
	}
}

// checkMoves fails the run when a test made a move the table does not
// allow.
func checkMoves(code int) int {
	illegalMoves.Lock()
	defer illegalMoves.Unlock()
	for m, n := range illegalMoves.seen {
		fmt.Printf("waiter move the table does not allow: %s (%d times)\n", m, n)
		code = 1
	}
	return code
}
