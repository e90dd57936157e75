package throttler

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/counters"
	"github.com/redis/go-redis/v9"
)

// refusalLog records the refusals a Transport reports.
type refusalLog struct {
	mu  sync.Mutex
	got []Refusal
}

func (l *refusalLog) observer() TransportObserver {
	return TransportObserver{Refused: func(_ context.Context, r Refusal) {
		l.mu.Lock()
		l.got = append(l.got, r)
		l.mu.Unlock()
	}}
}

func (l *refusalLog) verdicts() []counters.Verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	var v []counters.Verdict
	for _, r := range l.got {
		v = append(v, r.Verdict)
	}
	return v
}

// A 429 that says nothing (no Retry-After, no counter), under the default
// Counters and under every preset, is a refusal for quota: every replica
// backs off for Backoff, and the Transport reports it.
func TestBare429BacksOffOnEveryCounters(t *testing.T) {
	for _, c := range []struct {
		name string
		c    counters.Counters
	}{{"default", nil}, {"GitHub", counters.GitHub()}, {"OpenAI", counters.OpenAI()}, {"Anthropic", counters.Anthropic()}, {"Stripe", counters.Stripe()}, {"IETF", counters.IETF()}} {
		t.Run(c.name, func(t *testing.T) {
			api := &scriptedAPI{answers: []scripted{{status: 429, body: "too many"}}}
			srv := httptest.NewServer(api)
			defer srv.Close()
			defer srv.Client().CloseIdleConnections()
			th := miniThrottler(t, 100, time.Second)
			var log refusalLog
			tr := &Transport{Base: srv.Client().Transport, Route: th.Route(), Counters: c.c, Backoff: 2 * time.Second}
			tr.AddObserver(log.observer())
			before := time.Now()
			if code, body := do(t, &http.Client{Transport: tr}, srv.URL); code != 429 || body != "too many" {
				t.Fatalf("got %d %q, want the 429 handed back whole", code, body)
			}
			if d := th.Stats().PausedUntil.Sub(before); d < 1900*time.Millisecond || d > 3*time.Second {
				t.Fatalf("paused for %s after a bare 429, want the 2s back-off", d)
			}
			if got := log.verdicts(); len(got) != 1 || got[0] != counters.Pause {
				t.Fatalf("reported %v, want one Pause", got)
			}
			waitIdle(t, th)
		})
	}
}

// A 503 that says nothing is this call's alone: nobody pauses, and with
// Retries the request alone goes again.
func TestBare503RetriesTheCallAlone(t *testing.T) {
	api := &scriptedAPI{answers: []scripted{{status: 503}, {status: 200, body: "ok"}}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	th := miniThrottler(t, 100, time.Second)
	var log refusalLog
	tr := &Transport{Base: srv.Client().Transport, Route: th.Route(), Retries: 1}
	tr.AddObserver(log.observer())
	if code, body := do(t, &http.Client{Transport: tr}, srv.URL); code != 200 || body != "ok" {
		t.Fatalf("got %d %q, want the retry's 200", code, body)
	}
	if got := log.verdicts(); len(got) != 1 || got[0] != counters.RetryCall {
		t.Fatalf("reported %v, want one RetryCall", got)
	}
	if p := th.Stats().PausedUntil; !p.IsZero() {
		t.Fatalf("a bare 503 paused the Throttler until %s", p)
	}
	waitIdle(t, th)
}

// A counter at zero whose reset lies beyond MaxPause (GitHub's hour) holds
// every replica until the reset, up to the Throttler's interval, written
// once; a Retry-After as far is cut to MaxPause.
func TestResetBeyondMaxPause(t *testing.T) {
	now := time.Now()
	reset := now.Add(50 * time.Minute).Truncate(time.Second)
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    time.Time
	}{
		{"counter at zero", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": strconv.FormatInt(reset.Unix(), 10),
			"X-RateLimit-Resource": "core"}, reset},
		{"retry-after", map[string]string{"Retry-After": "3000"}, now.Add(15 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &scriptedAPI{answers: []scripted{{status: 403, headers: tc.headers}}}
			if tc.name == "retry-after" {
				api.answers[0].status = 429
			}
			srv := httptest.NewServer(api)
			defer srv.Close()
			defer srv.Client().CloseIdleConnections()
			c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			defer c.Close()
			hook := &goroutineHook{}
			c.AddHook(hook)
			th := mustNew(t, c, "k", 5000, time.Hour)
			tr := &Transport{Base: srv.Client().Transport, Route: th.Route(), Counters: counters.GitHub()}
			if err := th.Wait(context.Background()); err != nil { // the clock's first samples
				t.Fatal(err)
			}
			inline0, handOff0 := hook.counts()
			do(t, &http.Client{Transport: tr}, srv.URL)
			// One round trip admits the call, one writes the pause: the
			// verdict's pause and the counter at zero's are one.
			if inline, handOff := hook.counts(); inline+handOff-inline0-handOff0 != 2 {
				t.Errorf("%d round trips for one refused call, want 2 (admit, pause)", inline+handOff-inline0-handOff0)
			}
			if got := th.Stats().PausedUntil; got.Sub(tc.want).Abs() > 5*time.Second {
				t.Fatalf("paused until %s from now, want %s", got.Sub(now).Round(time.Second), tc.want.Sub(now).Round(time.Second))
			}
			waitIdle(t, th)
		})
	}
}
