package throttlerotel

import (
	"context"
	"testing"
	"time"

	"github.com/go-throttler/throttler"
)

// In shadow mode, throttler.shadow.wait records each call let go at once,
// by what enforcement would have done: 2 at once, 1 to wait, 1 refused (a
// wait past WithMaxWait), and with Redis down, 1 undecided.
func TestShadowWait(t *testing.T) {
	s := newSink(t)
	rdb, mr := newRedis(t)
	ctx := context.Background()
	th := instrumented(t, s, rdb, "shadow", 2, 10*time.Second, []throttler.Option{
		throttler.WithShadow(), throttler.WithMaxWait(time.Minute), throttler.WithRedisTimeout(100 * time.Millisecond)})
	for range 3 {
		if err := th.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := th.Wait(short); err != nil { // would wait about 10s, past its deadline
		t.Fatal(err)
	}
	members := func() int { m, _ := mr.ZMembers("shadow"); return len(m) }
	before := members()
	mr.SetError("injected: Redis is down")
	if err := th.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	mr.SetError("")
	// The undecided call went: it is written as debt once Redis is back.
	waitFor(t, "the undecided call not written", func() bool { return members() > before })

	got := s.collect(t)
	// A claim woken too late for its slot (a loaded machine) gives it back
	// and would have reserved again: one of the two that go then counts
	// as a wait, with the late wake in Stats (CI under load, once).
	late := th.Stats().Sends.LateWakes
	counts := map[string]uint64{}
	for decision, want := range map[string]uint64{"go": 2, "wait": 1, "refuse": 1, "undecided": 1} {
		n, sum := got.count(t, "throttler.shadow.wait", KeyAttribute.String("shadow"), ShadowDecisionAttribute.String(decision))
		counts[decision] = n
		if n != want && (decision == "refuse" || decision == "undecided") {
			t.Errorf("%s: %d calls, want %d", decision, n, want)
		}
		if decision == "wait" && sum < 5 {
			t.Errorf("the call over the limit would have waited %.1fs, want about 10s", sum)
		}
	}
	if counts["go"]+counts["wait"] != 3 || counts["go"]+min(late, 2) < 2 {
		t.Errorf("go: %d calls, wait: %d, want 2 and 1 (or one more wait for each of %d late wakes)", counts["go"], counts["wait"], late)
	}
}
