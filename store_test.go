package throttler

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
)

// faultStore wraps the store a Throttler talks to and injects faults at the
// seam: the next cutBefore round trips fail before reaching Redis, the next
// cutAfter fail after Redis applied them (the reply is lost), and the next
// failRemove removals fail.
type faultStore struct {
	store
	cutBefore, cutAfter, failRemove atomic.Int32
	// before, when set, runs as a round trip is sent, once.
	before atomic.Pointer[func()]
}

var errInjected = errors.New("injected fault")

func (s *faultStore) Reserve(ctx context.Context, a *core.Attempt) (core.Reply, error) {
	if f := s.before.Swap(nil); f != nil {
		(*f)()
	}
	if s.cutBefore.Add(-1) >= 0 {
		return core.Reply{}, errInjected
	}
	r, err := s.store.Reserve(ctx, a)
	if err == nil && s.cutAfter.Add(-1) >= 0 {
		return core.Reply{}, errInjected
	}
	return r, err
}

func (s *faultStore) Remove(ctx context.Context, members []string, at int64) error {
	if s.failRemove.Add(-1) >= 0 {
		return errInjected
	}
	return s.store.Remove(ctx, members, at)
}

// withFaults puts a faultStore between th and Redis.
func withFaults(th *Throttler) *faultStore {
	fs := &faultStore{store: th.st}
	th.st = fs
	return fs
}

// A round trip whose reply is lost after Redis applied it fails the call
// (FailClosed), and what it added is given back once Redis answers again:
// nothing is left counting for a call that did not go.
func TestLostReplyLeavesNothingBehind(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		c := dial()
		th := mustNew(t, c, key, 5, time.Hour, WithLogger(quiet))
		fs := withFaults(th)
		ctx := context.Background()
		if err := th.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		fs.cutAfter.Store(1)
		if err := th.WaitN(ctx, 2); !errors.Is(err, ErrRedis) {
			t.Fatalf("WaitN with its reply lost: %v, want ErrRedis", err)
		}
		waitIdle(t, th)
		if n := len(keyMembers(t, c, key)); n != 1 {
			t.Fatalf("once idle the window holds %d members, want only the call that went", n)
		}
	})
}
