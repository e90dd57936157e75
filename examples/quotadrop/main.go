// Command quotadrop measures what happens when a third-party API lowers its
// quota in the middle of a run: how many 429s each replica gets after the
// first one. The target is none: the first 429 (which nobody can foresee)
// should be the last, because the Transport that sees it pauses every
// replica until Retry-After and, with -follow-header, lowers every replica's
// limit to what the API now states in X-RateLimit-Limit.
//
// It starts a fake API (internal/fakeapi) that accepts -limit calls per
// -interval in a strict sliding window, answers 429 with Retry-After beyond
// that, and states its limit in X-RateLimit-Limit on every response; at
// -lower-at it lowers the limit to -lower-to. -replicas replicas each have
// their own Redis client, their own Throttler on one shared key and their own
// http.Client whose Transport is a throttler.Transport (Retries: -retries,
// LimitHeader: X-RateLimit-Limit when -follow-header). Each replica runs
// -goroutines goroutines that GET the API as fast as they are let through.
//
// Every second it prints the calls the API accepted from each replica, its
// 429s and the limit the Throttlers know. At the end it prints a summary: the
// rate before and after the drop, the largest window at the API against the
// limit in force, the time of the first 429 and the 429s of each replica
// after it, each explained by what its replica knew when it sent the call
// (recorded between the Transport and the network), when each replica
// learned of the pause and of the lowered limit, the retries sent, the
// limits known at the end, and a verdict. The exit status is 1 unless there
// were no 429s after the first, no window over the limit and no failed call.
//
// When the drop catches calls already on their way, the count depends on
// timing to the millisecond; -runs n repeats the run and prints how the
// count spread.
//
// Redis is an embedded miniredis unless REDIS_URL is set
// (e.g. REDIS_URL=redis://localhost:6379/0).
//
// Usage:
//
//	go run ./examples/quotadrop [-replicas 3] [-goroutines 20] [-limit 100] [-interval 1s]
//		[-lower-to 50] [-lower-at 2s] [-duration 6s] [-buffer 50ms] [-follow-header=true] [-retries 1]
//		[-reserve-ahead d] [-runs n] [-trace]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/exampleredis"
	"github.com/go-throttler/throttler/internal/fakeapi"
)

type config struct {
	replicas, goroutines, limit, lowerTo, retries int
	interval, lowerAt, duration, buffer           time.Duration
	reserveAhead                                  time.Duration // < 0: the library's default
	runs                                          int
	followHeader, trace                           bool
}

func main() {
	var c config
	flag.IntVar(&c.replicas, "replicas", 3, "number of replicas, each with its own Redis client, Throttler and http.Client")
	flag.IntVar(&c.goroutines, "goroutines", 20, "goroutines per replica calling the API")
	flag.IntVar(&c.limit, "limit", 100, "calls allowed per interval at first, by the API and by the Throttlers")
	flag.DurationVar(&c.interval, "interval", time.Second, "length of the sliding window")
	flag.IntVar(&c.lowerTo, "lower-to", 50, "the limit the API lowers its quota to")
	flag.DurationVar(&c.lowerAt, "lower-at", 2*time.Second, "when the API lowers its quota, from the start of the run")
	flag.DurationVar(&c.duration, "duration", 6*time.Second, "how long to run")
	flag.DurationVar(&c.buffer, "buffer", 50*time.Millisecond, "throttler.WithBuffer: margin for the time from admission to arrival at the API")
	flag.BoolVar(&c.followHeader, "follow-header", true, "set Transport.LimitHeader to "+fakeapi.LimitHeader+", so that the replicas lower their limit to the API's")
	flag.IntVar(&c.retries, "retries", 1, "Transport.Retries: how many times a call answered 429 is sent again after the pause")
	flag.IntVar(&c.runs, "runs", 1, "run this many times, each on a fresh API and key, and sum up the 429s after the first")
	flag.BoolVar(&c.trace, "trace", false, "also print every send from the drop on, and every pause and limit the replicas learned of")
	c.reserveAhead = -1
	flag.Func("reserve-ahead", "throttler.WithReserveAhead: how far ahead a waiting call may hold a slot (default: the library's, the interval capped at 1s)", func(v string) error {
		d, err := time.ParseDuration(v)
		if err == nil && d < 0 {
			err = errors.New("negative")
		}
		c.reserveAhead = d
		return err
	})
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: quotadrop [flags]\n\n"+
			"Replicas share a rate-limited API through Redis (miniredis unless REDIS_URL is set);\n"+
			"the API lowers its quota mid-run. Counts the 429s each replica gets after the first.\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 || c.replicas < 1 || c.goroutines < 1 || c.limit < 1 || c.lowerTo < 1 || c.retries < 0 || c.runs < 1 ||
		c.interval <= 0 || c.lowerAt <= 0 || c.duration <= c.lowerAt || c.buffer < 0 {
		flag.Usage()
		os.Exit(2)
	}
	if c.runs == 1 {
		if !run(c).ok {
			os.Exit(1)
		}
		return
	}
	os.Exit(runMany(c))
}

// runMany runs c.runs times and sums up the 429s after the first.
func runMany(c config) int {
	var (
		totals          []int
		byReplica       = make([]int, c.replicas)
		zero, none, bad int
	)
	for i := range c.runs {
		fmt.Printf("=== run %d of %d\n", i+1, c.runs)
		r := run(c)
		if r.err {
			return 1
		}
		if !r.ok {
			bad++
		}
		if r.afterFirst == 0 {
			zero++
		}
		if !r.any {
			none++
		}
		totals = append(totals, r.afterFirst)
		for j, n := range r.byReplica {
			byReplica[j] += n
		}
		fmt.Println()
	}
	sorted := slices.Sorted(slices.Values(totals))
	sum := 0
	for _, n := range totals {
		sum += n
	}
	var parts []string
	for j, n := range byReplica {
		parts = append(parts, fmt.Sprintf("r%d=%d", j, n))
	}
	fmt.Printf("over %d runs: 429s after the first, per run: %v\n", c.runs, totals)
	fmt.Printf("  median %d, mean %.1f, max %d; summed per replica: %s\n", sorted[len(sorted)/2], float64(sum)/float64(c.runs), sorted[len(sorted)-1], strings.Join(parts, " "))
	fmt.Printf("  runs with no 429 after the first: %d (of which %d had no 429 at all); runs that failed a check: %d\n",
		zero, none, bad)
	if bad > 0 {
		return 1
	}
	return 0
}

// result is what one run found.
type result struct {
	ok         bool  // every check passed
	err        bool  // the run could not be made
	any        bool  // there was a 429
	afterFirst int   // 429s after the first
	byReplica  []int // of them, per replica
}

// replica is one replica: its Throttler, its throttled client and what its
// callers got.
type replica struct {
	name  string
	thr   *throttler.Throttler
	conns *http.Transport // its connections to the API
	hc    *http.Client
	// Final answers returned to the callers (after the Transport's retries).
	ok, tooMany, failed atomic.Int64
}

func run(c config) result {
	newClient, where, stopRedis, err := exampleredis.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redis:", err)
		return result{err: true}
	}
	defer stopRedis()

	api := fakeapi.New(c.limit, c.interval)
	srv := httptest.NewServer(api)
	defer srv.Close()

	// A fresh key per run, so that runs against a real Redis share neither a
	// window nor a lowered limit.
	key := fmt.Sprintf("quotadrop:%d", time.Now().UnixNano())
	header := "off"
	if c.followHeader {
		header = fakeapi.LimitHeader
	}
	ahead := "default"
	if c.reserveAhead >= 0 {
		ahead = c.reserveAhead.String()
	}
	fmt.Printf("%d replicas x %d goroutines, limit %d per %v, lowered to %d at %v, for %v; buffer %v, reserve-ahead %s, retries %d, limit header %s; Redis: %s\n\n",
		c.replicas, c.goroutines, c.limit, c.interval, c.lowerTo, c.lowerAt, c.duration, c.buffer, ahead, c.retries, header, where)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()

	rec := &recorder{}
	reps := make([]*replica, c.replicas)
	for i := range reps {
		// Each replica keeps its own connections, enough for all its
		// goroutines: with net/http's default of 2 idle connections per
		// host, every burst would dial new ones, and the dials can delay
		// a call's arrival at the API by more than -buffer.
		conns := http.DefaultTransport.(*http.Transport).Clone()
		conns.MaxIdleConnsPerHost = c.goroutines
		defer conns.CloseIdleConnections()
		r := &replica{name: fmt.Sprintf("r%d", i), conns: conns}
		rc := newClient()
		defer rc.Close()
		opts := []throttler.Option{throttler.WithBuffer(c.buffer),
			throttler.WithObserver(throttler.Observer{
				// Called under the Throttler's lock: only record.
				Paused:       func(until time.Time) { rec.event(i, until, 0) },
				LimitChanged: func(limit int) { rec.event(i, time.Time{}, limit) },
			})}
		if c.reserveAhead >= 0 {
			opts = append(opts, throttler.WithReserveAhead(c.reserveAhead))
		}
		r.thr, err = throttler.New(rc, key, c.limit, c.interval, opts...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "throttler.New:", err)
			return result{err: true}
		}
		tr := &throttler.Transport{
			Base:    &probe{base: r.conns, replica: i, thr: r.thr, rec: rec},
			Route:   r.thr.Route(),
			Retries: c.retries,
		}
		if c.followHeader {
			tr.LimitHeader = fakeapi.LimitHeader
		}
		r.hc = &http.Client{Transport: tr}
		reps[i] = r
	}

	start := time.Now()
	ctx, cancelRun := context.WithDeadline(ctx, start.Add(c.duration))
	defer cancelRun()
	var dropAt atomic.Int64 // UnixNano; 0 until the API lowered its limit
	drop := time.AfterFunc(c.lowerAt, func() {
		api.SetLimit(c.lowerTo)
		dropAt.Store(time.Now().UnixNano())
	})
	defer drop.Stop()

	// From the drop on, note when each Throttler first states a lower limit
	// (Stats().Limit, polled every millisecond): Observer.LimitChanged is not
	// called when a Throttler lowers its own limit (see limitAt in explain).
	limitSeen := make([]time.Time, len(reps))
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if dropAt.Load() == 0 {
				continue
			}
			all := true
			for i, r := range reps {
				if !limitSeen[i].IsZero() {
					continue
				}
				if r.thr.Stats().LimitNow < c.limit {
					limitSeen[i] = time.Now()
				} else {
					all = false
				}
			}
			if all {
				return
			}
		}
	}()

	var (
		wg       sync.WaitGroup
		firstErr sync.Once
	)
	for _, r := range reps {
		for range c.goroutines {
			wg.Go(func() {
				for ctx.Err() == nil {
					status, err := call(ctx, r.hc, srv.URL, r.name)
					switch {
					case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
						return // the run is over, or this goroutine's next slot is after its end
					case err != nil:
						r.failed.Add(1)
						firstErr.Do(func() { fmt.Fprintln(os.Stderr, "call failed:", err) })
						time.Sleep(100 * time.Millisecond) // don't spin on a persistent error
					case status == http.StatusOK:
						r.ok.Add(1)
					case status == http.StatusTooManyRequests:
						r.tooMany.Add(1)
					default:
						r.failed.Add(1)
						firstErr.Do(func() { fmt.Fprintln(os.Stderr, "call failed: status", status) })
					}
				}
			})
		}
	}

	// Print what the API saw in each second until the run ends, against
	// the API's limit in that second.
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	lastTick := start
loop:
	for n := 1; ; n++ {
		select {
		case lastTick = <-ticker.C:
			printLine(fmt.Sprintf("t=%ds", n), reps, api.TakeCounts(), c.limitsIn(time.Duration(n-1)*time.Second, time.Duration(n)*time.Second))
		case <-ctx.Done():
			break loop
		}
	}
	cancel()
	wg.Wait()
	<-polled
	end := time.Now()
	if counts := api.TakeCounts(); end.Sub(lastTick) > 100*time.Millisecond && counts.Accepted+counts.Rejected > 0 {
		printLine(fmt.Sprintf("t=%.1fs", end.Sub(start).Seconds()), reps, counts, c.limitsIn(lastTick.Sub(start), end.Sub(start)))
	}

	var dropped time.Time
	if ns := dropAt.Load(); ns != 0 {
		dropped = time.Unix(0, ns)
	}
	return summary(c, api, reps, rec, limitSeen, start, dropped, end)
}

// attemptsKey keys the context value in which probe follows the sends of
// one call: the Transport's retries keep the caller's context.
type attemptsKey struct{}

// attempts follows the sends of one call.
type attempts struct {
	mu       sync.Mutex
	n        int
	lastDone time.Time // when the previous send's answer came (or the call began)
}

// call makes one GET request through the throttled client hc and returns the
// status of the answer its caller got.
func call(ctx context.Context, hc *http.Client, url, replica string) (int, error) {
	ctx = context.WithValue(ctx, attemptsKey{}, &attempts{lastDone: time.Now()})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(fakeapi.ReplicaHeader, replica)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, errors.Join(err, resp.Body.Close())
}

// send is one request that a Throttler let through, as probe saw it on its
// way to the network: what its replica knew then, and what came back.
type send struct {
	replica     int
	waitFrom    time.Time // when the Throttler's Wait for this send began, about
	sent, done  time.Time
	status      int  // 0: no response
	retry       bool // a Transport retry, not the call's first send
	knownLimit  int  // the replica's Stats().Limit when it was sent
	pausedUntil time.Time
}

// event is a replica learning of a pause (until set) or of a new limit.
type event struct {
	replica int
	at      time.Time
	until   time.Time // a pause until then
	limit   int       // the limit in force became this
}

type recorder struct {
	mu     sync.Mutex
	sends  []send
	events []event
}

func (r *recorder) event(replica int, until time.Time, limit int) {
	now := time.Now()
	r.mu.Lock()
	r.events = append(r.events, event{replica: replica, at: now, until: until, limit: limit})
	r.mu.Unlock()
}

// probe sits between a Transport and the network: every request it sees was
// admitted by the replica's Throttler (a first send or a retry).
type probe struct {
	base    http.RoundTripper
	replica int
	thr     *throttler.Throttler
	rec     *recorder
}

func (p *probe) RoundTrip(req *http.Request) (*http.Response, error) {
	s := send{replica: p.replica}
	st := p.thr.Stats()
	s.knownLimit, s.pausedUntil = st.LimitNow, st.PausedUntil
	s.sent = time.Now()
	a, _ := req.Context().Value(attemptsKey{}).(*attempts)
	if a != nil {
		// A retry's Wait begins once the Transport has read the previous
		// answer (and written the pause): shortly after it came.
		a.mu.Lock()
		a.n++
		s.retry, s.waitFrom = a.n > 1, a.lastDone
		a.mu.Unlock()
	}
	resp, err := p.base.RoundTrip(req)
	s.done = time.Now()
	if a != nil {
		a.mu.Lock()
		a.lastDone = s.done
		a.mu.Unlock()
	}
	if err == nil {
		s.status = resp.StatusCode
	}
	p.rec.mu.Lock()
	p.rec.sends = append(p.rec.sends, s)
	p.rec.mu.Unlock()
	return resp, err
}

func perSecond(limit int, interval time.Duration) float64 {
	return float64(limit) * float64(time.Second) / float64(interval)
}

// limitsIn formats the API's limit per second in the part [from, to) of
// the run: "100", "50" or, across the drop, "100->50".
func (c config) limitsIn(from, to time.Duration) string {
	before, after := fmt.Sprintf("%.4g", perSecond(c.limit, c.interval)), fmt.Sprintf("%.4g", perSecond(c.lowerTo, c.interval))
	switch {
	case c.lowerAt <= from:
		return after
	case c.lowerAt >= to:
		return before
	}
	return before + "->" + after
}

// printLine prints one line of per-replica counts at the API, with the
// limit each Throttler knows now.
func printLine(label string, reps []*replica, c fakeapi.Counts, perSecond string) {
	var b strings.Builder
	for _, r := range reps {
		fmt.Fprintf(&b, " %s=%d", r.name, c.AcceptedByReplica[r.name])
	}
	fmt.Printf("%-6s %s  total=%d/%s  429s=%d  limit-known=%s\n", label, b.String(), c.Accepted, perSecond, c.Rejected, knownLimits(reps))
}

// knownLimits is the limit the Throttlers know: one number if they agree,
// else one per replica.
func knownLimits(reps []*replica) string {
	lims := make([]string, len(reps))
	for i, r := range reps {
		lims[i] = fmt.Sprint(r.thr.Stats().LimitNow)
	}
	if slices.Equal(lims, slices.Repeat(lims[:1], len(lims))) {
		return lims[0]
	}
	return strings.Join(lims, ",")
}

// summary prints the result of the run and returns it.
func summary(c config, api *fakeapi.API, reps []*replica, rec *recorder, limitSeen []time.Time, start, dropped, end time.Time) result {
	s := api.Stats()
	arrivals := api.Arrivals()
	rejections := api.Rejections()
	rec.mu.Lock()
	sends, events := slices.Clone(rec.sends), slices.Clone(rec.events)
	rec.mu.Unlock()
	secs := func(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }
	rel := func(t time.Time) string { return secs(t.Sub(start)) }
	verdict := func(ok bool) string {
		if ok {
			return "OK"
		}
		return "FAIL"
	}
	if dropped.IsZero() {
		dropped = end // the run ended first: nothing after the drop
	}

	fmt.Printf("\nsummary after %s (the API lowered its limit from %d to %d at %s)\n",
		rel(end), c.limit, c.lowerTo, rel(dropped))

	// Throughput and windows, before and after the drop.
	i := sortIndex(arrivals, dropped)
	before, after := arrivals[:i], arrivals[i:]
	rate := func(n int, d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f/s", float64(n)/d.Seconds())
	}
	fmt.Printf("  accepted before the drop:  %d in %s = %s (limit %.4g/s)\n",
		len(before), secs(dropped.Sub(start)), rate(len(before), dropped.Sub(start)), perSecond(c.limit, c.interval))
	fmt.Printf("  accepted after the drop:   %d in %s = %s (limit %.4g/s)\n",
		len(after), secs(end.Sub(dropped)), rate(len(after), end.Sub(dropped)), perSecond(c.lowerTo, c.interval))
	if steady := dropped.Add(c.interval); steady.Before(end) {
		n := len(arrivals) - sortIndex(arrivals, steady)
		fmt.Printf("  accepted from drop+%v on: %d in %s = %s\n", c.interval, n, secs(end.Sub(steady)), rate(n, end.Sub(steady)))
	}
	maxBefore, maxAfter := fakeapi.MaxInWindow(before, c.interval), fakeapi.MaxInWindow(after, c.interval)
	windowOK := maxBefore <= c.limit && maxAfter <= c.lowerTo && s.MaxInWindow <= max(c.limit, c.lowerTo)
	fmt.Printf("  max in any %v window:      %d of the calls before the drop (limit %d), %d of those after it (limit %d)  %s\n",
		c.interval, maxBefore, c.limit, maxAfter, c.lowerTo, verdict(windowOK))

	// How long calls took from leaving the Transport to their answer: an
	// upper bound on the time from admission to arrival at the API, which
	// -buffer must cover.
	if len(sends) > 0 {
		rtt := make([]time.Duration, len(sends))
		over := 0
		for i, x := range sends {
			rtt[i] = x.done.Sub(x.sent)
			if rtt[i] > c.buffer {
				over++
			}
		}
		slices.Sort(rtt)
		fmt.Printf("  send to answer:            p50 %.1fms, p99 %.1fms, max %.1fms; %d of %d sends over the %v buffer\n",
			ms(rtt[len(rtt)/2]), ms(rtt[len(rtt)*99/100]), ms(rtt[len(rtt)-1]), over, len(rtt), c.buffer)
	}

	// 429s at the API.
	early, _ := slices.BinarySearchFunc(rejections, dropped, func(x fakeapi.Rejection, t time.Time) int { return x.At.Compare(t) })
	fmt.Printf("  429s at the API:           %d%s, %d of them before the drop\n", len(rejections),
		perReplica(reps, func(name string) int { return s.RejectedByReplica[name] }), early)
	afterFirst := 0
	res := result{byReplica: make([]int, len(reps))}
	if len(rejections) > 0 {
		first := rejections[0]
		fmt.Printf("  first 429:                 at %s (%s after the drop), to %s\n",
			rel(first.At), secs(first.At.Sub(dropped)), first.Replica)
		later := map[string]int{}
		var last time.Time
		for _, x := range rejections[1:] {
			later[x.Replica]++
			last = x.At
		}
		afterFirst = len(rejections) - 1
		res.any = true
		for i, r := range reps {
			res.byReplica[i] = later[r.name]
		}
		span := ""
		if afterFirst > 0 {
			span = fmt.Sprintf("  (the last at %s, %s after the first)", rel(last), secs(last.Sub(first.At)))
		}
		fmt.Printf("  429s after the first:      %d%s%s\n", afterFirst, perReplica(reps, func(name string) int { return later[name] }), span)
	} else {
		fmt.Printf("  first 429:                 none\n")
		fmt.Printf("  429s after the first:      0  (no 429 at all)\n")
	}

	if c.trace {
		trace(reps, sends, events, start, dropped)
	}
	// Why each later 429 happened, from what its replica knew when it sent it.
	explain(c, reps, sends, events, limitSeen, start, dropped)

	// The callers' side.
	var retries, finalOK, final429, failed int64
	for _, x := range sends {
		if x.retry {
			retries++
		}
	}
	for _, r := range reps {
		finalOK += r.ok.Load()
		final429 += r.tooMany.Load()
		failed += r.failed.Load()
	}
	sent429 := 0
	for _, x := range sends {
		if x.status == http.StatusTooManyRequests {
			sent429++
		}
	}
	fmt.Printf("  retries sent:              %d (calls whose caller got the 429 itself: %d; 200s to callers: %d)\n", retries, final429, finalOK)
	if sent429 != len(rejections) {
		fmt.Printf("  note: the replicas saw %d 429s, the API sent %d (answers cut off by the end of the run)\n", sent429, len(rejections))
	}
	fmt.Printf("  failed calls:              %d  %s\n", failed, verdict(failed == 0))
	pauses := map[string]int{}
	for _, r := range reps {
		pauses[r.name] = int(r.thr.Stats().Pauses)
	}
	fmt.Printf("  at the end:                API limit %d; limit known by the Throttlers: %s; pauses set or learned:%s\n",
		api.Limit(), knownLimits(reps), perReplica(reps, func(name string) int { return pauses[name] }))

	ok := afterFirst == 0 && windowOK && failed == 0
	switch {
	case ok && len(rejections) == 0:
		fmt.Printf("  verdict:                   OK: no 429 at all\n")
	case ok:
		fmt.Printf("  verdict:                   OK: the first 429 was the only one\n")
	default:
		var why []string
		if afterFirst > 0 {
			why = append(why, fmt.Sprintf("%d 429s after the first (target: none)", afterFirst))
		}
		if !windowOK {
			why = append(why, "a window over the limit")
		}
		if failed > 0 {
			why = append(why, fmt.Sprintf("%d failed calls", failed))
		}
		fmt.Printf("  verdict:                   FAIL: %s\n", strings.Join(why, ", "))
	}
	res.ok, res.afterFirst = ok, afterFirst
	return res
}

// explain sorts the 429s the replicas saw, other than the first, by what
// their replica knew when it sent the call, and prints when each replica
// learned of the pause and of the lowered limit. limitSeen holds when a
// poll of each replica's Stats first showed a lower limit.
func explain(c config, reps []*replica, sends []send, events []event, limitSeen []time.Time, start, dropped time.Time) {
	rel := func(t time.Time) string { return fmt.Sprintf("%.3fs", t.Sub(start).Seconds()) }
	var got []send
	for _, x := range sends {
		if x.status == http.StatusTooManyRequests {
			got = append(got, x)
		}
	}
	// The first is the 429 whose answer came back first: no replica can
	// have known of the drop from a 429 before then.
	slices.SortStableFunc(got, func(a, b send) int { return a.done.Compare(b.done) })

	// When each replica first learned of a pause and of a lower limit, from
	// the drop on: from its Observer, or for the limit from the poll,
	// whichever came first (a Throttler that lowers its own limit through
	// LowerLimit does not tell its Observer).
	pauseAt := make([]time.Time, len(reps))
	limitAt := slices.Clone(limitSeen)
	var news time.Time // when the first replica took a pause (set it, or read it from Redis)
	for _, e := range events {
		if e.at.Before(dropped) {
			continue
		}
		switch {
		case !e.until.IsZero() && pauseAt[e.replica].IsZero():
			pauseAt[e.replica] = e.at
			if news.IsZero() || e.at.Before(news) {
				news = e.at
			}
		case e.until.IsZero() && e.limit < c.limit && (limitAt[e.replica].IsZero() || e.at.Before(limitAt[e.replica])):
			limitAt[e.replica] = e.at
		}
	}
	var first send
	if len(got) > 0 {
		first = got[0]
		fmt.Printf("  the first 429 back at a replica:   %s, sent at %s, answered at %s\n", reps[first.replica].name, rel(first.sent), rel(first.done))
	}
	for i, r := range reps {
		p, l := "never", "never"
		if !pauseAt[i].IsZero() {
			p = fmt.Sprintf("at %s (%+.1fms after the first 429 came back)", rel(pauseAt[i]), ms(pauseAt[i].Sub(first.done)))
		}
		if !limitAt[i].IsZero() {
			l = fmt.Sprintf("at %s (drop%+.1fms)", rel(limitAt[i]), ms(limitAt[i].Sub(dropped)))
		}
		fmt.Printf("    %s learned of a pause %s, of the lower limit %s\n", r.name, p, l)
	}
	if len(got) <= 1 {
		return
	}

	type bucket struct {
		what     string
		n        []int // per replica
		total    int
		min, max time.Duration // sent, from the first's send
		early    int           // of them, calls whose Wait began before the drop
		longest  time.Duration // the longest such Wait
		knew     int           // of them, sent with the lower limit already known
	}
	buckets := []*bucket{
		{what: "sent before any 429 had come back (nobody could know yet)"},
		{what: "sent after a 429 had come back to the same replica, before its Transport had applied the pause"},
		{what: "sent after a 429 had come back to another replica, before any replica had taken the pause"},
		{what: "sent after another replica had taken the pause, before this one's next round trip read it"},
		{what: "sent while the replica knew of a pause in force"},
		{what: "sent after the pause, the replica knowing the API's lower limit"},
		{what: "sent after the pause, the replica still at a higher limit than the API's"},
	}
	for _, b := range buckets {
		b.n = make([]int, len(reps))
	}
	// When a 429 first came back to each replica.
	own := make([]time.Time, len(reps))
	for _, x := range got {
		if own[x.replica].IsZero() || x.done.Before(own[x.replica]) {
			own[x.replica] = x.done
		}
	}
	retried := 0
	for _, x := range got[1:] {
		if x.retry {
			retried++
		}
		learned := pauseAt[x.replica]
		var k int
		switch {
		case x.sent.Before(first.done):
			k = 0
		case !x.sent.Before(own[x.replica]) && (learned.IsZero() || x.sent.Before(learned)):
			k = 1
		case news.IsZero() || x.sent.Before(news):
			k = 2
		case learned.IsZero() || x.sent.Before(learned):
			k = 3
		case x.pausedUntil.After(x.sent):
			k = 4
		case x.knownLimit <= c.lowerTo:
			k = 5
		default:
			k = 6
		}
		b := buckets[k]
		d := x.sent.Sub(first.sent)
		if b.total == 0 {
			b.min, b.max = d, d
		}
		b.min, b.max = min(b.min, d), max(b.max, d)
		b.n[x.replica]++
		b.total++
		if x.waitFrom.Before(dropped) {
			b.early++
			b.longest = max(b.longest, x.sent.Sub(x.waitFrom))
		}
		if x.knownLimit < c.limit {
			b.knew++
		}
	}
	fmt.Printf("  the %d other 429s the replicas saw, by what their replica knew when it sent the call (%d of them were retries):\n", len(got)-1, retried)
	for _, b := range buckets {
		if b.total == 0 {
			continue
		}
		var parts []string
		for i, n := range b.n {
			parts = append(parts, fmt.Sprintf("%s=%d", reps[i].name, n))
		}
		fmt.Printf("    %4d %s\n         (%s; sent %+.1fms..%+.1fms from the first's send; %d entered Wait before the drop, up to %.0fms before sending; %d with the lower limit known)\n",
			b.total, b.what, strings.Join(parts, " "), ms(b.min), ms(b.max), b.early, ms(b.longest), b.knew)
	}
}

// trace prints every send from the drop on and every event, in time order.
func trace(reps []*replica, sends []send, events []event, start, dropped time.Time) {
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.4fs", t.Sub(start).Seconds())
	}
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, x := range sends {
		if x.sent.Before(dropped) {
			continue
		}
		kind := "send "
		if x.retry {
			kind = "retry"
		}
		lines = append(lines, line{x.sent, fmt.Sprintf("%s %s answered %s status %d; knew limit %d, paused until %s; Wait from %s",
			reps[x.replica].name, kind, rel(x.done), x.status, x.knownLimit, rel(x.pausedUntil), rel(x.waitFrom))})
	}
	for _, e := range events {
		if e.until.IsZero() {
			lines = append(lines, line{e.at, fmt.Sprintf("%s learned limit %d", reps[e.replica].name, e.limit)})
		} else {
			lines = append(lines, line{e.at, fmt.Sprintf("%s learned pause until %s", reps[e.replica].name, rel(e.until))})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	fmt.Println("  trace:")
	for _, l := range lines {
		fmt.Printf("    %s %s\n", rel(l.at), l.text)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// perReplica formats one number per replica.
func perReplica(reps []*replica, n func(name string) int) string {
	var b strings.Builder
	for _, r := range reps {
		fmt.Fprintf(&b, " %s=%d", r.name, n(r.name))
	}
	return "  (" + strings.TrimSpace(b.String()) + ")"
}

// sortIndex returns the index of the first time in sorted at or after t.
func sortIndex(sorted []time.Time, t time.Time) int {
	i, _ := slices.BinarySearchFunc(sorted, t, time.Time.Compare)
	return i
}
