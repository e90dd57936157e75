package throttler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// In shadow mode every call goes at once, whatever the limit: 12 calls at
// 5 an hour return, each counted in the window where it went (5 admitted,
// 7 as debt), and Stats.Shadow counts the 7 that would have waited, and the
// one whose deadline that wait would have passed as refused; an Observer
// sees each decision.
func TestShadowLetsEveryCallGo(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		var mu sync.Mutex
		var seen []ShadowInfo
		th := mustNew(t, dial(), key, 5, time.Hour, WithShadow(), WithObserver(Observer{
			Shadowed: func(_ context.Context, s ShadowInfo) { mu.Lock(); seen = append(seen, s); mu.Unlock() },
		}))
		ctx := ContextWithTenant(context.Background(), "acme")
		for i := range 11 {
			if err := th.Wait(ctx); err != nil {
				t.Fatalf("call %d: %v", i+1, err)
			}
		}
		short, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := th.Wait(short); err != nil {
			t.Fatalf("a call whose wait would pass its deadline: %v", err)
		}
		st := th.Stats()
		want := ShadowStats{Calls: 12, Waits: 7, Refusals: 1}
		if got := st.Shadow; got.Calls != want.Calls || got.Waits != want.Waits || got.Refusals != want.Refusals || got.Errors != 0 {
			t.Fatalf("Stats.Shadow = %+v, want %+v", got, want)
		}
		if st.Shadow.Waited < 7*50*time.Minute {
			t.Errorf("the 7 calls over the limit would have waited %s in all, want about 7 hours", st.Shadow.Waited)
		}
		if st.Admitted != 12 {
			t.Errorf("Admitted %d; want all 12, which went", st.Admitted)
		}
		if n := len(keyMembers(t, dial(), key)); n != 12 {
			t.Errorf("the window holds %d members, want the 12 calls", n)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 12 || seen[11].Tenant != "acme" || !seen[11].Refused || seen[11].Why != RejectedDeadline || seen[0].Wait != 0 || seen[5].Wait < 50*time.Minute {
			t.Errorf("the Observer saw %+v", seen)
		}
		waitIdle(t, th)
	})
}

// In shadow mode AllowN allows every call and counts what it would have
// refused; WithMaxWait's bound shows as a refusal of a wait.
func TestShadowAllowAndMaxWait(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		th := mustNew(t, dial(), key, 2, time.Hour, WithShadow(), WithMaxWait(time.Second))
		ctx := context.Background()
		for i := range 3 {
			if r, err := th.Allow(ctx); err != nil || !r.Allowed {
				t.Fatalf("Allow %d: %+v, %v", i+1, r, err)
			}
		}
		if err := th.Wait(ctx); err != nil {
			t.Fatalf("a wait past WithMaxWait: %v", err)
		}
		if got := th.Stats().Shadow; got.Calls != 4 || got.Refusals != 2 || got.Waits != 1 {
			t.Fatalf("Stats.Shadow = %+v, want 4 calls, 2 refusals (an AllowN, a wait past WithMaxWait), 1 wait", got)
		}
		waitIdle(t, th)
	})
}

// Shadow mode against an enforcing twin on the same workload, a burst of 9
// calls on a limit of 5 per 300ms (no call waits behind another that
// waits): the shadow would have delayed exactly the calls the twin
// delayed, each by about what the twin's waited.
func TestShadowMatchesAnEnforcingTwin(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial dialer, key string) {
		const limit, calls, interval = 5, 9, 300 * time.Millisecond
		shadow := mustNew(t, dial(), key+":shadow", limit, interval, WithShadow())
		twin := mustNew(t, dial(), key+":twin", limit, interval)
		ctx := context.Background()
		waits := make([]time.Duration, calls)
		var wg sync.WaitGroup
		for i := range calls {
			if err := shadow.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				if err := twin.Wait(ctx); err != nil {
					t.Error(err)
				}
				waits[i] = time.Since(start)
			}()
		}
		wg.Wait()
		var delayed int
		var waited time.Duration
		for _, w := range waits {
			if w > interval/2 {
				delayed++
				waited += w
			}
		}
		s := shadow.Stats().Shadow
		if int(s.Waits) != delayed || delayed != calls-limit {
			t.Fatalf("the shadow would have delayed %d calls, the twin delayed %d (waits %v); want %d each", s.Waits, delayed, waits, calls-limit)
		}
		// The twin's waits include its buffer (50ms) and the scheduling;
		// the shadow's are the room's own: within a buffer and a bit.
		mean, twinMean := s.Waited/time.Duration(s.Waits), waited/time.Duration(delayed)
		if d := twinMean - mean; d < -20*time.Millisecond || d > 100*time.Millisecond {
			t.Errorf("the shadow's would-wait averages %s, the twin's wait %s", mean, twinMean)
		}
		t.Logf("would-wait %s on average, the twin's %s", mean, twinMean)
		waitIdle(t, shadow)
		waitIdle(t, twin)
	})
}

// Shadow mode lets a call go when Redis fails, whatever the failure
// policy (FailClosed here, which would fail it), and counts it undecided.
func TestShadowGoesWhenRedisFails(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	defer c.Close()
	th := mustNew(t, c, "k", 5, time.Second, WithShadow(), WithLogger(quiet), WithRedisTimeout(100*time.Millisecond))
	mr.SetError("injected: Redis is down")
	if err := th.Wait(context.Background()); err != nil {
		t.Fatalf("Wait with Redis down, in shadow mode: %v", err)
	}
	if r, err := th.Allow(context.Background()); err != nil || !r.Allowed {
		t.Fatalf("Allow with Redis down, in shadow mode: %+v, %v", r, err)
	}
	if got := th.Stats().Shadow; got.Calls != 2 || got.Errors != 2 {
		t.Fatalf("Stats.Shadow = %+v, want 2 calls, both undecided", got)
	}
	mr.SetError("")
	waitIdle(t, th)
}
