package throttler

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/counters"
)

// join keeps every field of both Observers, a's first: a field added to
// Observer but not to join fails here.
func TestObserverJoinKeepsEveryField(t *testing.T) {
	var calls []string
	fill := func(name string) Observer {
		var o Observer
		v := reflect.ValueOf(&o).Elem()
		for i := range v.NumField() {
			field := v.Type().Field(i)
			v.Field(i).Set(reflect.MakeFunc(field.Type, func([]reflect.Value) []reflect.Value {
				calls = append(calls, name+"."+field.Name)
				return nil
			}))
		}
		return o
	}
	a, b := fill("a"), fill("b")
	joined := reflect.ValueOf(a.join(b))
	for i := range joined.NumField() {
		f := joined.Field(i)
		name := joined.Type().Field(i).Name
		if f.IsNil() {
			t.Errorf("joined %s is nil", name)
			continue
		}
		calls = nil
		args := make([]reflect.Value, f.Type().NumIn())
		for j := range args {
			args[j] = reflect.Zero(f.Type().In(j))
		}
		f.Call(args)
		if want := []string{"a." + name, "b." + name}; !reflect.DeepEqual(calls, want) {
			t.Errorf("joined %s called %v, want %v", name, calls, want)
		}
	}
	// A nil field on either side keeps the other's function itself.
	half := Observer{Paused: func(time.Time) {}}
	if got := half.join(Observer{}); got.Paused == nil || got.Admitted != nil {
		t.Errorf("join with an empty Observer: Paused set %t, Admitted set %t; want true, false", got.Paused != nil, got.Admitted != nil)
	}
}

// waitLog records what Waited reports, and the value ctx carried.
type waitLog struct {
	mu     sync.Mutex
	waits  []WaitInfo
	values []any
}

type ctxKey struct{}

func (l *waitLog) observer() Observer {
	return Observer{Waited: func(ctx context.Context, w WaitInfo) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.waits = append(l.waits, w)
		l.values = append(l.values, ctx.Value(ctxKey{}))
	}}
}

func (l *waitLog) snapshot() ([]WaitInfo, []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]WaitInfo(nil), l.waits...), append([]any(nil), l.values...)
}

// AddObserver adds to WithObserver's: both see every event from then on,
// in order; Waited sees each wait with the caller's context, its times and
// its error, whatever its outcome.
func TestAddObserverAndWaited(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string
	)
	note := func(s string) func(int, time.Duration) {
		return func(int, time.Duration) { mu.Lock(); order = append(order, s); mu.Unlock() }
	}
	th := miniThrottler(t, 2, time.Minute, WithObserver(Observer{Admitted: note("first")}))
	var log waitLog
	th.AddObserver(Observer{Admitted: note("second")})
	th.AddObserver(log.observer())
	th.AddObserver(Observer{}) // adds nothing

	ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
	before := time.Now()
	if err := th.WaitN(ctx, 2); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	full := th.Wait(short) // the minute's two calls are spent: turned away at once
	if why, ok := RejectionOf(full); !ok || why != RejectedDeadline {
		t.Fatalf("Wait over the limit: %v, RejectionOf = (%v, %t); want RejectedDeadline", full, why, ok)
	}
	bad := th.WaitN(ctx, 0)
	if !errors.Is(bad, ErrInvalidArgument) {
		t.Fatalf("WaitN(0) = %v, want ErrInvalidArgument", bad)
	}
	if _, ok := RejectionOf(bad); ok {
		t.Error("RejectionOf(ErrInvalidArgument) reports a rejection")
	}

	mu.Lock()
	if want := []string{"first", "second"}; !reflect.DeepEqual(order, want) {
		t.Errorf("Admitted called %v, want %v", order, want)
	}
	mu.Unlock()
	waits, values := log.snapshot()
	if len(waits) != 3 {
		t.Fatalf("Waited reported %d waits, want 3: %+v", len(waits), waits)
	}
	if w := waits[0]; w.N != 2 || w.Err != nil || w.Start.Before(before) || w.End.Before(w.Start) || w.End.After(after) {
		t.Errorf("admitted wait reported as %+v; want N 2, no error, %s <= Start <= End <= %s", w, before, after)
	}
	if w := waits[1]; w.N != 1 || w.Err != full {
		t.Errorf("rejected wait reported as %+v, want N 1 and the error Wait returned", w)
	}
	if w := waits[2]; w.N != 0 || w.Err != bad {
		t.Errorf("bad wait reported as %+v, want N 0 and the error WaitN returned", w)
	}
	for i, v := range values {
		if v != "caller" {
			t.Errorf("wait %d: Waited's context carried %v, want the caller's", i, v)
		}
	}
	waitIdle(t, th)
}

// AddObserver is safe while the Throttler is in use (run with -race).
func TestAddObserverConcurrent(t *testing.T) {
	th := miniThrottler(t, 1000, time.Minute)
	var (
		mu       sync.Mutex
		admitted int
		wg       sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			for range 10 {
				if err := th.Wait(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			th.AddObserver(Observer{Admitted: func(n int, _ time.Duration) { mu.Lock(); admitted += n; mu.Unlock() }})
		})
	}
	wg.Wait()
	mu.Lock()
	got := admitted
	mu.Unlock()
	// Once every AddObserver has returned, each wait reaches all four.
	if err := th.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if admitted-got != 4 {
		t.Errorf("a wait after the four AddObserver reached %d of them, want 4", admitted-got)
	}
	waitIdle(t, th)
}

// InFlight reports each change in order: the differences between the
// numbers reported add up to the places held, zero once every call ended.
func TestInFlightReportsInOrder(t *testing.T) {
	_, c := miniClient(t)
	th := mustNew(t, c, "{k}", 1000, time.Minute, WithInFlight("{k}:inflight", 3, time.Minute))
	var (
		mu           sync.Mutex
		last, sum    int
		bad, reports int
	)
	th.AddObserver(Observer{InFlight: func(n int) {
		mu.Lock()
		defer mu.Unlock()
		if d := n - last; d != 1 && d != -1 {
			bad++
		}
		sum += n - last
		last = n
		reports++
	}})
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range 5 {
				if err := th.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if bad != 0 || sum != 0 || last != 0 || reports != 60 {
		t.Errorf("InFlight: %d reports (want 60), %d not one apart from the last, ending at %d with differences summing to %d; want 0 and 0", reports, bad, last, sum)
	}
	waitIdle(t, th)
}

// An Observer added while calls follow the failure policy is told so as
// it is added: every Observer's Degraded calls alternate from true.
func TestAddObserverToldDegraded(t *testing.T) {
	mr, c := miniClient(t)
	th := mustNew(t, c, "k", 10, time.Second, WithLogger(quiet), WithFailurePolicy(FailOpen()))
	var (
		mu          sync.Mutex
		first, late []bool
	)
	record := func(to *[]bool) Observer {
		return Observer{Degraded: func(on bool) { mu.Lock(); *to = append(*to, on); mu.Unlock() }}
	}
	seen := func() ([]bool, []bool) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(first), slices.Clone(late)
	}
	th.AddObserver(record(&first)) // not degraded: told nothing
	if f, _ := seen(); len(f) != 0 {
		t.Fatalf("an Observer added to a healthy Throttler saw Degraded %v", f)
	}
	mr.SetError("injected: Redis is down")
	if err := th.Wait(context.Background()); err != nil {
		t.Fatalf("Wait under FailOpen with Redis down: %v", err)
	}
	th.AddObserver(record(&late))
	if f, l := seen(); !slices.Equal(f, []bool{true}) || !slices.Equal(l, []bool{true}) {
		t.Fatalf("Degraded: the first Observer saw %v, the one added while degraded %v; want [true] for both", f, l)
	}
	mr.SetError("")
	// Redis is tried again a second after it failed: the next call's round
	// trip then reaches it, which ends the degradation.
	waitLocked(t, th, 10*time.Second, "still degraded 10s after Redis failed", func() bool { return !th.fallback.isDegraded() })
	if err := th.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitLocked(t, th, 10*time.Second, "no false reported once a round trip reached Redis", func() bool {
		f, _ := seen()
		return len(f) == 2
	})
	if f, l := seen(); !slices.Equal(f, []bool{true, false}) || !slices.Equal(l, []bool{true, false}) {
		t.Errorf("Degraded once Redis answered: %v and %v, want [true false] for both", f, l)
	}
	waitIdle(t, th)
}

// Group.AddObserver reaches the Throttlers the Group holds and those it
// makes later, each with its own call.
func TestGroupAddObserver(t *testing.T) {
	_, c := miniClient(t)
	g := mustGroup(t, c, "obs", KeyQuota{Limit: 10, Interval: time.Minute})
	early := mustFor(t, g, "early")
	var (
		mu    sync.Mutex
		made  []*Throttler
		waits = map[*Throttler]int{}
	)
	g.AddObserver(nil) // adds nothing
	g.AddObserver(func(th *Throttler) Observer {
		mu.Lock()
		made = append(made, th)
		mu.Unlock()
		return Observer{Waited: func(context.Context, WaitInfo) { mu.Lock(); waits[th]++; mu.Unlock() }}
	})
	late := mustFor(t, g, "late")
	if mustFor(t, g, "late") != late {
		t.Fatal("For made the key's Throttler anew")
	}
	for _, th := range []*Throttler{early, late, late} {
		if err := th.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(made) != 2 || made[0] != early || made[1] != late {
		t.Errorf("newObserver was called with %d Throttlers, want the early one, then the late one", len(made))
	}
	if waits[early] != 1 || waits[late] != 2 {
		t.Errorf("waits observed: early %d, late %d; want 1 and 2", waits[early], waits[late])
	}
	waitIdle(t, early)
	waitIdle(t, late)
}

// Group.AddObserver calls newObserver for the Throttlers held without
// the Group's lock: For goes on meanwhile, and a Throttler it makes then
// gets the Observer once, as every Throttler held does.
func TestGroupAddObserverOutsideTheLock(t *testing.T) {
	_, c := miniClient(t)
	g := mustGroup(t, c, "unlocked", KeyQuota{Limit: 10, Interval: time.Minute})
	held := mustFor(t, g, "held")
	var (
		mu      sync.Mutex
		calls   = map[*Throttler]int{}
		entered = make(chan struct{})
		release = make(chan struct{})
		added   = make(chan struct{})
	)
	go func() {
		defer close(added)
		g.AddObserver(func(th *Throttler) Observer {
			mu.Lock()
			calls[th]++
			mu.Unlock()
			if th == held {
				close(entered)
				<-release // For must not wait for this
			}
			return Observer{}
		})
	}()
	<-entered
	fresh := mustFor(t, g, "fresh") // would wait for release forever under the lock
	if mustFor(t, g, "held") != held {
		t.Fatal("For made the held key's Throttler anew")
	}
	close(release)
	<-added
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 || calls[held] != 1 || calls[fresh] != 1 {
		t.Errorf("newObserver calls: held %d, fresh %d, %d Throttlers in all; want 1, 1, 2", calls[held], calls[fresh], len(calls))
	}
}

// retryOnce reads the first response as RetryCall, and every later one as
// no refusal.
type retryOnce struct {
	mu   sync.Mutex
	seen int
}

func (*retryOnce) Peek(*http.Response) bool { return false }

func (r *retryOnce) Read(*http.Response, []byte, time.Time) counters.Quota {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen++
	if r.seen == 1 {
		return counters.Quota{Verdict: counters.RetryCall}
	}
	return counters.Quota{}
}

// A Transport reports each refusal, with whether it sends the request again.
func TestTransportObserverRefused(t *testing.T) {
	th := miniThrottler(t, 100, time.Second)
	api := &backoffAPI{refuse: 3, retryAfter: "0"}
	srv := httptest.NewServer(api)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	var (
		mu     sync.Mutex
		seen   []Refusal
		vals   []any
		called []time.Time
	)
	tr := &Transport{Base: srv.Client().Transport, Route: th.Route(), Retries: 1}
	record := func(ctx context.Context, r Refusal) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r)
		vals = append(vals, ctx.Value(ctxKey{}))
		called = append(called, now)
	}
	// At lies between the refused send's arrival and the report, and
	// before the next send's arrival; At is zeroed to compare the rest.
	checkAt := func(from int) {
		t.Helper()
		arrivals, _, _ := api.snapshot()
		for i := range seen {
			at, sent := seen[i].At, arrivals[from+i]
			if at.Before(sent) || called[i].Before(at) || (from+i+1 < len(arrivals) && arrivals[from+i+1].Before(at)) {
				t.Errorf("refusal %d: At %s, want from the send's arrival %s to the report %s, before the next send", i, at, sent, called[i])
			}
			seen[i].At = time.Time{}
		}
	}
	tr.AddObserver(TransportObserver{Refused: record})
	tr.AddObserver(TransportObserver{}) // adds nothing

	ctx := context.WithValue(context.Background(), ctxKey{}, "request")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := tr.RoundTrip(req) // 429, retried once, 429 again: returned
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	checkAt(0)
	want := []Refusal{
		{Throttler: th, StatusCode: http.StatusTooManyRequests, Verdict: counters.Pause, Attempt: 0, Retry: true},
		{Throttler: th, StatusCode: http.StatusTooManyRequests, Verdict: counters.Pause, Attempt: 1, Retry: false},
	}
	if !reflect.DeepEqual(seen, want) || vals[0] != "request" || vals[1] != "request" {
		t.Errorf("Refused saw %+v with contexts carrying %v; want %+v with the request's", seen, vals, want)
	}
	seen, vals, called = nil, nil, nil
	mu.Unlock()

	// A RetryCall, then a response that is no refusal.
	tr2 := &Transport{Base: srv.Client().Transport, Route: th.Route(), Retries: 1, Counters: &retryOnce{}}
	tr2.AddObserver(TransportObserver{Refused: record})
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err = tr2.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].Verdict != counters.RetryCall || !seen[0].Retry || seen[0].Attempt != 0 {
		t.Fatalf("Refused saw %+v, want one RetryCall at attempt 0, retried", seen)
	}
	// At comes before the RetryCall's delay, and the report after it.
	if at := seen[0].At; called[0].Sub(at) < retryCallDelay(0) {
		t.Errorf("RetryCall: At %s, reported %s later; want At before the delay of %s", at, called[0].Sub(at), retryCallDelay(0))
	}
	checkAt(2)
	waitIdle(t, th)
}

// goid returns the calling goroutine's id, from its stack's header
// ("goroutine 18 [running]:").
func goid() string {
	buf := make([]byte, 64)
	return strings.Fields(string(buf[:runtime.Stack(buf, false)]))[1]
}

// Admitted and Rejected are called on the caller's goroutine as its wait
// (or AllowN) returns, and Waited after them, before the call returns; a
// wait given a nil Context is reported to none of them.
func TestObserverWaitEventsOnTheCaller(t *testing.T) {
	var (
		mu     sync.Mutex
		events []string
	)
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, s+"@"+goid())
	}
	th := miniThrottler(t, 2, time.Minute, WithObserver(Observer{
		Admitted: func(int, time.Duration) { note("admitted") },
		Rejected: func(Rejection) { note("rejected") },
		Waited:   func(context.Context, WaitInfo) { note("waited") },
	}))
	me := goid()
	ctx := context.Background()
	if err := th.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	note("returned")
	if res, err := th.Allow(ctx); err != nil || !res.Allowed {
		t.Fatalf("Allow: %+v, %v", res, err)
	}
	note("returned")
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, ok := RejectionOf(th.Wait(short)); !ok { // the minute's two calls are spent
		t.Fatal("a third call in a minute of two was not turned away")
	}
	note("returned")
	var none context.Context
	if err := th.Wait(none); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Wait(nil): %v, want ErrInvalidArgument", err)
	}
	note("returned")
	mu.Lock()
	defer mu.Unlock()
	var want []string
	for _, s := range []string{"admitted", "waited", "returned", "admitted", "returned", "rejected", "waited", "returned", "returned"} {
		want = append(want, s+"@"+me)
	}
	if !slices.Equal(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
}
