package throttler

import (
	"slices"
	"testing"

	"github.com/go-throttler/throttler/internal/core"
)

// TestOwedRecheckAfterSuccess: what a failed round trip added for its batch,
// and what it was to give back, is given back a second time, and only by a
// round trip planned after one that succeeded (which reaches the server
// after every request it read before).
func TestOwedRecheckAfterSuccess(t *testing.T) {
	ours := &waiter{res: reservation{members: []string{"a1", "a2"}}}
	failed := &core.Attempt{
		Removals: core.Removals{Remove: []string{"old"}},
		Adds:     []core.Entry{{Member: "a1"}, {Member: "a2"}, {Member: "replayed"}},
	}
	var o owed
	o.doubt(failed, []*waiter{ours})
	if !o.pending() {
		t.Fatal("pending() = false with members to recheck")
	}
	// Before a success, every round trip carries them, and they stay.
	for range 2 {
		got := o.takeRecheck()
		slices.Sort(got)
		if want := []string{"a1", "a2", "old"}; !slices.Equal(got, want) {
			t.Fatalf("takeRecheck() before any round trip succeeded = %v, want %v", got, want)
		}
		if !o.pending() {
			t.Fatal("recheck taken off the list before a round trip succeeded")
		}
	}
	o.sent(&core.Attempt{}) // a round trip succeeds
	got := o.takeRecheck()
	slices.Sort(got)
	if want := []string{"a1", "a2", "old"}; !slices.Equal(got, want) {
		t.Fatalf("takeRecheck() after a success = %v, want %v (not the replayed member, which counts)", got, want)
	}
	if o.pending() || o.takeRecheck() != nil {
		t.Fatal("recheck still pending after it was taken")
	}

	// A second failure before the success restarts the wait for one.
	o.doubt(failed, []*waiter{ours})
	o.sent(&core.Attempt{})
	o.doubt(&core.Attempt{Removals: core.Removals{Remove: []string{"later"}}}, nil)
	o.takeRecheck()
	if !o.pending() {
		t.Fatal("a failure after the success: recheck taken off the list before another success")
	}

	// Failures in a row doubt the same give-backs again: listed once each
	// (an outage of thousands of failed round trips must not grow the list).
	var long owed
	for range 1000 {
		long.doubt(failed, []*waiter{ours})
	}
	if len(long.recheck) != 3 {
		t.Fatalf("after 1000 failures doubting the same 3 members, recheck holds %d", len(long.recheck))
	}

}
