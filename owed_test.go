package throttler

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// TestOwedRecheckAfterSuccess: what a failed round trip added for its batch,
// and what it was to give back, is given back a second time, and only by a
// round trip planned after one that succeeded (which reaches the server
// after every request it read before).
func TestOwedRecheckAfterSuccess(t *testing.T) {
	const w, horizon = 1_000_000, 2_000_000
	ours := &waiter{res: reservation{members: []string{"a1", "a2"}}}
	failed := &core.Attempt{
		Removals: core.Removals{Remove: []string{"old"}},
		Adds:     []core.Entry{{Member: "a1"}, {Member: "a2"}, {Member: "replayed"}},
	}
	var o owed
	o.doubt(failed, []*waiter{ours}, 0, w, horizon, false)
	if !o.pending() {
		t.Fatal("pending() = false with members to recheck")
	}
	// Before a success, a round trip with something else to send does not
	// carry them; a probe does; both leave them on the list.
	if got := o.takeRecheck(false); got != nil {
		t.Fatalf("takeRecheck(not a probe) before any round trip succeeded = %v, want none", got)
	}
	for range 2 {
		got := o.takeRecheck(true)
		slices.Sort(got)
		if want := []string{"a1", "a2", "old"}; !slices.Equal(got, want) {
			t.Fatalf("takeRecheck(probe) before any round trip succeeded = %v, want %v", got, want)
		}
		if !o.pending() {
			t.Fatal("recheck taken off the list before a round trip succeeded")
		}
	}
	o.sent(&core.Attempt{}) // a round trip succeeds
	got := o.takeRecheck(false)
	slices.Sort(got)
	if want := []string{"a1", "a2", "old"}; !slices.Equal(got, want) {
		t.Fatalf("takeRecheck() after a success = %v, want %v (not the replayed member, which counts)", got, want)
	}
	if o.pending() || o.takeRecheck(true) != nil {
		t.Fatal("recheck still pending after it was taken")
	}

	// A second failure before the success restarts the wait for one.
	o.doubt(failed, []*waiter{ours}, 0, w, horizon, false)
	o.sent(&core.Attempt{})
	o.doubt(&core.Attempt{Removals: core.Removals{Remove: []string{"later"}}}, nil, 0, w, horizon, false)
	o.takeRecheck(false)
	if !o.pending() {
		t.Fatal("a failure after the success: recheck taken off the list before another success")
	}

	// Failures in a row doubt the same give-backs again: listed once each
	// (an outage of thousands of failed round trips must not grow the list).
	var long owed
	for range 1000 {
		long.doubt(failed, []*waiter{ours}, 0, w, horizon, false)
	}
	if len(long.recheck) != 3 {
		t.Fatalf("after 1000 failures doubting the same 3 members, recheck holds %d", len(long.recheck))
	}
}

// TestOwedRecheckBoundedInALongOutage: an outage of hours in which callers
// retry through every failure (seed 21213: FallbackLocal, a process cut
// off from Redis for good) doubts fresh members with each failed round
// trip. Those that count nowhere any more leave the list, so that it holds
// about a window of them, and no round trip carries more than
// recheckChunk; once Redis answers, the rest goes a chunk per round trip.
func TestOwedRecheckBoundedInALongOutage(t *testing.T) {
	const w, horizon = 10_000_000, 11_000_000 // a 10s window, 1s ahead (µs)
	const step = 10_000                       // a failure every 10ms
	var o owed
	most := 0
	for i := range 30_000 { // 5 minutes, 30 windows
		now := int64(i) * step
		member := fmt.Sprintf("m%d", i)
		batch := []*waiter{{res: reservation{members: []string{member}}}}
		a := &core.Attempt{Adds: []core.Entry{{Member: member, Score: now + step}}}
		a.Removals = core.Removals{Remove: []string{"given-" + member}}
		a.Remove = append(a.Remove, o.takeRecheck(false)...)
		o.doubt(a, batch, now, w, horizon, false)
		most = max(most, len(o.recheck))
	}
	// A window's failures doubt 2*1,000 members, reserve-ahead's 100 more;
	// pruning at twice the size lets the list reach about twice that.
	if limit := 2 * 2 * (w + horizon) / step; most > int(limit) {
		t.Fatalf("recheck grew to %d members over 30 windows of failures, want at most %d", most, limit)
	}
	if got := o.takeRecheck(false); got != nil {
		t.Fatalf("a failing round trip carried %d members to recheck, want none", len(got))
	}
	if probe := o.takeRecheck(true); len(probe) > recheckChunk {
		t.Fatalf("a probe carried %d members, want at most %d", len(probe), recheckChunk)
	}

	// Redis answers: the list goes, a chunk per round trip.
	left := len(o.recheck)
	o.sent(&core.Attempt{})
	for left > 0 {
		got := o.takeRecheck(false)
		if want := min(left, recheckChunk); len(got) != want {
			t.Fatalf("after a success, a round trip carried %d members, want %d", len(got), want)
		}
		left -= len(got)
		o.sent(&core.Attempt{})
	}
	if o.pending() {
		t.Fatal("recheck still pending after every chunk went")
	}
}

// TestOwedGiveUpKeepsWhatStillCounts: giveUp drops a doubted member once
// it counts nowhere, not before: an add once the longest window has
// passed its score, however far ahead a wrong clock estimate scored it.
func TestOwedGiveUpKeepsWhatStillCounts(t *testing.T) {
	const w = 1_000_000
	var o owed
	batch := []*waiter{{res: reservation{members: []string{"near", "far"}}}}
	o.doubt(&core.Attempt{Adds: []core.Entry{{Member: "near", Score: 500_000}, {Member: "far", Score: 60_000_000}}},
		batch, 0, w, 2*w, false)
	o.giveUp(time.Unix(0, 0), 0, w, 1_600_000)
	if _, ok := o.recheck["near"]; ok {
		t.Fatal("giveUp kept a member whose score left the longest window")
	}
	if _, ok := o.far["far"]; !ok {
		t.Fatal("giveUp dropped a member scored ahead that still counts")
	}
	o.giveUp(time.Unix(0, 0), 0, w, 61_000_000)
	if o.pending() {
		t.Fatal("giveUp kept a member that counts nowhere")
	}
}

// TestOwedFarGoesAgainForATail: a member a failed round trip scored
// further ahead than reserve-ahead (a stepped clock's estimate) may be
// applied after any number of round trips that gave it back (seed 60797):
// once one succeeded, it goes again every farEvery, not once, for farTail
// (the network's delay) or until its score has left the window, whichever
// comes first, and leaves the list when the client is closed. A window of
// an hour must not keep the worker sending for an hour (it did: the test
// TestFailOpenCountsFailedBatchWhenItGoes waited for an idle worker).
func TestOwedFarGoesAgainForATail(t *testing.T) {
	const w, horizon = 1_000_000, 2_000_000 // a 1s window, 1s ahead (µs)
	batch := []*waiter{{res: reservation{members: []string{"near", "far"}}}}
	for _, tc := range []struct {
		name  string
		score int64 // µs: the far member's
		sends int
	}{
		{"a tail", 60_000_000, int(farTail/farEvery) + 1}, // counts for a minute: the tail ends it
		{"its window", 3_000_000, 8},                      // counts until 4s: every 500ms from 0 to 3.5s
	} {
		t.Run(tc.name, func(t *testing.T) {
			failed := &core.Attempt{Adds: []core.Entry{{Member: "near", Score: 500_000}, {Member: "far", Score: tc.score}}}
			var o owed
			o.doubt(failed, batch, 0, w, horizon, false)
			rt := time.Unix(100, 0)
			if got := o.takeFar(false, rt, 0); got != nil {
				t.Fatalf("takeFar before any round trip succeeded = %v, want none", got)
			}
			if got := o.takeFar(true, rt, 0); !slices.Equal(got, []string{"far"}) {
				t.Fatalf("takeFar(probe) = %v, want [far]", got)
			}
			if until, end := o.farLast(); until != tc.score+w || !end.IsZero() {
				t.Fatalf("farLast before a success = %d, %v; want %d and no end", until, end, tc.score+w)
			}
			rt = rt.Add(time.Minute) // an outage: the tail runs from the first success
			o.sent(&core.Attempt{})
			if got := o.takeRecheck(false); !slices.Equal(got, []string{"near"}) {
				t.Fatalf("takeRecheck after a success = %v, want [near]: far is listed apart", got)
			}
			sends := 0
			for i := 0; i <= 40; i++ {
				at := rt.Add(time.Duration(i) * farEvery)
				serverNow := int64(i) * farEvery.Microseconds()
				got := o.takeFar(false, at, serverNow)
				if busy := o.pending(); busy != (got != nil) {
					t.Fatalf("at +%s: pending() = %v while takeFar = %v", at.Sub(rt), busy, got)
				}
				if got == nil {
					continue
				}
				sends++
				if until, end := o.farLast(); until != tc.score+w || !end.Equal(rt.Add(farTail)) {
					t.Fatalf("farLast at +%s = %d, %v; want %d and the tail's end, %v", at.Sub(rt), until, end, tc.score+w, rt.Add(farTail))
				}
				if !slices.Equal(got, []string{"far"}) {
					t.Fatalf("takeFar at +%s = %v, want [far]", at.Sub(rt), got)
				}
				if wait := o.farWait(at); wait <= 0 || wait > farEvery {
					t.Fatalf("farWait at +%s = %s, want within (0, %s]", at.Sub(rt), wait, farEvery)
				}
				if half := o.takeFar(false, at.Add(farEvery/2), serverNow); half != nil {
					t.Fatalf("takeFar within farEvery of the last = %v, want none", half)
				}
			}
			if sends != tc.sends {
				t.Fatalf("far went %d times, want %d", sends, tc.sends)
			}
			if until, end := o.farLast(); until != 0 || !end.IsZero() {
				t.Fatalf("farLast once far was dropped = %d, %v; want 0 and no end", until, end)
			}
			o.doubt(failed, batch, 0, w, horizon, false)
			o.forget()
			if o.pending() {
				t.Fatal("forget kept a far member")
			}
		})
	}
}

// A failed round trip's give-backs of calls written for sure are given
// back again plainly only when no window compacts: on a key that compacts,
// a plain removal that reached Redis before the failed request would have
// its GiveBackScript take the calls for compacted and drop them from their
// bucket (TestGiveBackResentBeforeItsLateFirstSend).
func TestOwedDoubtsForSureGiveBacksOnlyWithoutCompaction(t *testing.T) {
	const w, horizon = 1_000_000, 2_000_000
	failed := &core.Attempt{Removals: core.Removals{Remove: []string{"plain"}, GiveBack: []core.Entry{{Score: 5, Member: "sure"}}}}
	for _, compacts := range []bool{false, true} {
		var o owed
		o.doubt(failed, nil, 0, w, horizon, compacts)
		got := o.takeRecheck(true)
		slices.Sort(got)
		want := []string{"plain", "sure"}
		if compacts {
			want = []string{"plain"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("compacts %v: recheck %v, want %v", compacts, got, want)
		}
		a := &core.Attempt{Removals: core.Removals{Remove: []string{"plain"}, GiveBack: []core.Entry{{Score: 5, Member: "sure"}}}}
		a.Resent(compacts)
		if !slices.Equal(a.Remove, want) || a.GiveBack != nil {
			t.Errorf("compacts %v: resent with Remove %v and GiveBack %v, want Remove %v and none", compacts, a.Remove, a.GiveBack, want)
		}
	}
}
