package throttler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/fakeapi"
	"github.com/go-throttler/throttler/internal/redistest"
)

// TestFaultRedisHangs: redis-server stopped with SIGSTOP for 2s under load
// from three Throttlers (separate clients), once per failure policy. Waits
// return within the Redis timeout as the policy says, FallbackLocal keeps
// the total within the limit during the hang, and throughput is back soon
// after SIGCONT.
func TestFaultRedisHangs(t *testing.T) {
	redistest.Long(t)
	for _, c := range []struct {
		name   string
		policy FailurePolicy
	}{
		{"FailClosed", FailClosed()},
		{"FailOpen", FailOpen()},
		{"FallbackLocal", FallbackLocal(1.0 / 3)},
	} {
		t.Run(c.name, func(t *testing.T) { redisHangCase(t, c.policy) })
	}
}

func redisHangCase(t *testing.T, policy FailurePolicy) {
	const (
		limit      = 20
		interval   = 500 * time.Millisecond
		buffer     = 50 * time.Millisecond
		timeout    = 300 * time.Millisecond
		hang       = 2 * time.Second
		goroutines = 4
		short      = 150 * time.Millisecond // the deadline of half the FailClosed Waits
		slack      = 150 * time.Millisecond // scheduling, on a loaded 2-core machine with -race
	)
	ahead := min(interval, time.Second)
	w := interval + buffer
	kind := policy.kind
	srv := redistest.Start(t)
	key := srv.Key(t, "hang")
	probe := srv.NewClient()

	type waitRec struct {
		start, end time.Time
		deadline   time.Duration // 0 = none
		err        error
		th         int
	}
	var (
		mu     sync.Mutex
		waits  []waitRec
		scores []int64 // admissions Redis counted (onAdmit), minus given back
		byMem  = map[string]int64{}
	)
	var ths []*Throttler
	for range 3 {
		th := mustNew(t, srv.NewClient(), key, limit, interval, WithBuffer(buffer), WithLogger(quiet),
			WithRedisTimeout(timeout), WithFailurePolicy(policy))
		th.hooks.onAdmit = func(score int64, members []string) {
			mu.Lock()
			for _, m := range members {
				byMem[m] = score
			}
			mu.Unlock()
		}
		th.hooks.onRelease = func(members []string) {
			mu.Lock()
			for _, m := range members {
				delete(byMem, m)
			}
			mu.Unlock()
		}
		ths = append(ths, th)
	}
	// FailClosed: once Redis answers, only the members of the round trips
	// that timed out during the hang are in the way, for interval+buffer.
	backBound := w
	if kind != policyClosed {
		// Degraded policies retry Redis at most once a second: up to that
		// plus the timeout of a failing retry until the last Throttler is
		// back; then FallbackLocal's replayed calls hold the window for w,
		// and the limit admissions take a few round trips (250ms).
		backBound = retryRedisAfter + timeout + w + 250*time.Millisecond
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, th := range ths {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					var dl time.Duration
					if kind == policyClosed && rng.IntN(2) == 0 {
						dl = short
						ctx, cancel = context.WithTimeout(ctx, dl)
					}
					start := time.Now()
					err := th.Wait(ctx)
					end := time.Now()
					cancel()
					mu.Lock()
					waits = append(waits, waitRec{start: start, end: end, deadline: dl, err: err, th: i})
					mu.Unlock()
					if err != nil {
						time.Sleep(20 * time.Millisecond)
					} else {
						time.Sleep(2 * time.Millisecond) // the call
					}
				}
			}()
		}
	}
	time.Sleep(700 * time.Millisecond)
	pauseAt := time.Now()
	srv.Pause(t)
	time.Sleep(hang)
	srv.Resume(t)
	resumeAt := time.Now()
	// Round trips that timed out during the hang are still in Redis's
	// socket buffers: it runs them now. Their members, of calls that did
	// not go, are not given back (FailClosed drops its give-backs once no
	// caller waits) and hold their slots for up to interval+buffer.
	time.Sleep(100 * time.Millisecond)
	inKey := keyMembers(t, probe, key)
	// Run until Redis has counted limit admissions since SIGCONT, or past
	// the bound for it, and a little more.
	for end := resumeAt.Add(backBound + slack); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := 0
		for _, s := range byMem {
			if s >= resumeAt.UnixMicro() {
				n++
			}
		}
		mu.Unlock()
		if n >= limit {
			break
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	for _, th := range ths {
		waitIdle(t, th)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range byMem {
		scores = append(scores, s)
	}
	slices.Sort(scores)
	zombies := 0
	for m, s := range inKey {
		if _, ok := byMem[m]; !ok && s > pauseAt.UnixMicro() && s < resumeAt.UnixMicro() {
			zombies++
		}
	}

	// No lost call: every Wait returned (wg.Wait), with nil or an error
	// the policy allows.
	errs := map[string]int{}
	var slowest time.Duration // of the Waits started during the hang
	var slowestRec waitRec
	for _, r := range waits {
		class := waitErrClass(r.err)
		errs[class]++
		switch {
		case class == "":
		case class == "redis" && kind == policyClosed:
		case class == "deadline" && r.deadline > 0:
		default:
			t.Errorf("Wait (policy %s, deadline %s): unexpected error %v", policy, r.deadline, r.err)
		}
		if r.start.After(pauseAt) && r.start.Before(resumeAt) && r.end.Before(resumeAt) {
			if d := r.end.Sub(r.start); d > slowest {
				slowest, slowestRec = d, r
			}
		}
	}
	// Returned in time (FailClosed, FailOpen; under FallbackLocal a Wait
	// waits for its local slot, as it should): a Wait started during the
	// hang is answered within the Redis timeout, or, with a deadline,
	// within what WaitN documents for a ctx that ends first: the deadline
	// plus two Redis calls of at most min(250ms, Redis timeout) each,
	// waiting out the round trip that may be adding its members, then
	// removing them; plus slack. (The bound was the Redis timeout or the
	// deadline and one call, whichever came first, and a Wait of a run of
	// .ci/run on a fresh clone returned after 552ms against 300ms+150ms:
	// by its times, its claim went out as it started, its deadline passed
	// while the round trip hung, and it waited out that round trip's
	// timeout (300ms) and then a removal that hung too (250ms), as WaitN
	// documents.) A Throttler's first failure may also have
	// to wait out its worker's nap (core.QuietFloor, for its short window):
	// a waiter joining a non-empty queue does not wake it.
	late, deadlineRedis := 0, 0
	for _, r := range waits {
		if r.deadline == 0 && errors.Is(r.err, ErrRedis) && errors.Is(r.err, context.DeadlineExceeded) {
			deadlineRedis++
		}
		if kind == policyLocal || !r.start.After(pauseAt) || !r.end.Before(resumeAt) {
			continue
		}
		bound := timeout
		if r.deadline > 0 {
			// abandon waits out the round trip in flight, at most the
			// release timeout from the ctx's end (the round trip may
			// have gone out up to the deadline, its own timeout ending
			// later), then makes one release.
			release := min(250*time.Millisecond, timeout)
			bound = r.deadline + 2*release
		}
		if r.start.Before(pauseAt.Add(core.QuietFloor + timeout)) {
			bound += core.QuietFloor
		}
		if d := r.end.Sub(r.start); d > bound+slack {
			late++
			if late <= 5 {
				t.Errorf("a Wait started %s into the hang (deadline %s) returned %v after %s, bound %s+%s",
					r.start.Sub(pauseAt).Round(time.Millisecond), r.deadline, r.err, d.Round(time.Millisecond), bound, slack)
			}
		}
	}
	// The measured return times of the Waits with a deadline shorter than
	// the Redis timeout, started during the hang.
	var shortDone []time.Duration
	for _, r := range waits {
		if r.deadline > 0 && r.err != nil && r.start.After(pauseAt) && r.end.Before(resumeAt) {
			shortDone = append(shortDone, r.end.Sub(r.start))
		}
	}
	slices.Sort(shortDone)

	var admittedDuring []time.Time // Waits that returned nil, pure hang part
	hangFrom := pauseAt.Add(ahead + 100*time.Millisecond)
	for _, r := range waits {
		if r.err == nil && r.end.After(hangFrom) && r.end.Before(resumeAt) {
			admittedDuring = append(admittedDuring, r.end)
		}
	}
	worstHang := fakeapi.MaxInWindow(admittedDuring, interval)
	var detail string
	switch kind {
	case policyClosed:
		// Nothing goes that Redis did not count: once the slots reserved
		// before the hang are used up, nothing is admitted until it ends.
		if len(admittedDuring) > 0 {
			t.Errorf("FailClosed admitted %d calls during the hang, after the slots reserved before it", len(admittedDuring))
		}
		if worst := core.MaxInWindow(scores, w.Microseconds()); worst > limit {
			t.Errorf("over the admission scores a window of %s held %d, limit %d", w, worst, limit)
		}
		detail = fmt.Sprintf("worst window %d (scores); Waits with a %s deadline returned after %s (median) to %s (max); %d ErrRedis of Waits without a deadline also match context.DeadlineExceeded; %d members of timed-out round trips written by Redis after SIGCONT",
			core.MaxInWindow(scores, w.Microseconds()), short, medianDuration(shortDone), slices.Max(append(shortDone, 0)), deadlineRedis, zombies)
	case policyOpen:
		if errs["redis"] > 0 {
			t.Errorf("FailOpen: %d Waits returned ErrRedis", errs["redis"])
		}
		detail = fmt.Sprintf("%d calls went unthrottled during the hang", len(admittedDuring))
	case policyLocal:
		// Each process keeps a third of the limit: together, within it.
		if worstHang > limit {
			t.Errorf("FallbackLocal(1/3): during the hang a window of %s held %d admissions, limit %d", interval, worstHang, limit)
		}
		if len(admittedDuring) == 0 {
			t.Errorf("FallbackLocal admitted nothing during the hang")
		}
		var all []time.Time
		for _, r := range waits {
			if r.err == nil && r.end.After(hangFrom) {
				all = append(all, r.end)
			}
		}
		// Across recovery too: a process back on Redis admits nothing new
		// until the others have written their local calls back.
		worstAfter := fakeapi.MaxInWindow(all, interval)
		if worstAfter > limit {
			t.Errorf("FallbackLocal(1/3): from the hang to the end, across recovery, a window of %s held %d calls, limit %d", interval, worstAfter, limit)
		}
		detail = fmt.Sprintf("during the hang worst window %d of %d admissions (limit %d); from then to the end, across recovery, worst %d",
			worstHang, len(admittedDuring), limit, worstAfter)
	}

	// Throughput back: the time from SIGCONT to the limit-th admission
	// counted in Redis (scored after SIGCONT), and to the first.
	r := resumeAt.UnixMicro()
	var afterResume []int64
	for _, s := range scores {
		if s >= r {
			afterResume = append(afterResume, s)
		}
	}
	firstBack, fullBack := "never", "never"
	if len(afterResume) > 0 {
		firstBack = fmtMicros(afterResume[0] - r)
	}
	if len(afterResume) < limit {
		t.Errorf("after SIGCONT only %d admissions were counted in Redis, want at least %d", len(afterResume), limit)
	} else {
		d := time.Duration(afterResume[limit-1]-r) * time.Microsecond
		fullBack = d.Round(time.Millisecond).String()
		if d > backBound+slack {
			t.Errorf("after SIGCONT the %d-th admission counted in Redis came after %s, want within %s", limit, d, backBound)
		}
	}
	t.Logf("outcome: %s: %d Waits (ok=%d redis=%d deadline=%d); slowest Wait started during the hang %s (deadline %s, %v); %s; after SIGCONT first Redis admission %s, %d-th %s",
		policy, len(waits), errs[""], errs["redis"], errs["deadline"], slowest.Round(time.Millisecond), slowestRec.deadline, waitErrClass(slowestRec.err),
		detail, firstBack, limit, fullBack)
}

func medianDuration(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[len(d)/2].Round(time.Millisecond)
}
