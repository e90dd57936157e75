package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/bench/internal/fakeapi"
	"github.com/go-throttler/throttler/bench/internal/impls"
	"github.com/go-throttler/throttler/bench/internal/metrics"
	"github.com/redis/go-redis/v9"
)

// ReplicaEnv is the environment variable that carries a replica's
// configuration (JSON) to the re-executed binary.
const ReplicaEnv = "THROTTLER_BENCH_REPLICA"

// ReplicaFlag is the argument the harness passes to the binary it re-executes
// as a replica (informative: the configuration is in ReplicaEnv).
const ReplicaFlag = "-replica"

// ReplicaConfig is what the parent tells a replica.
type ReplicaConfig struct {
	Index      int           `json:"index"`
	Impl       string        `json:"impl"`
	Kind       Kind          `json:"kind"`
	RedisAddr  string        `json:"redis_addr"`
	Key        string        `json:"key"`
	Limit      int           `json:"limit"`
	Interval   time.Duration `json:"interval"`
	Buffer     time.Duration `json:"buffer"`
	Procs      int           `json:"procs"`
	Goroutines int           `json:"goroutines"`
	Duration   time.Duration `json:"duration"`
	Warmup     time.Duration `json:"warmup"`
	APIURL     string        `json:"api_url"`
	Requests   int           `json:"requests,omitempty"` // KindLLM: calls per Interval
	Unit       int           `json:"unit,omitempty"`     // KindLLM: tokens per unit of the token Throttler
	InFlight   int           `json:"inflight,omitempty"` // KindInFlight: WithInFlight's n
	// KindStorm: the range of each Wait's deadline.
	DeadlineMin time.Duration `json:"deadline_min,omitempty"`
	DeadlineMax time.Duration `json:"deadline_max,omitempty"`
	// KindPriority: high-priority arrivals per second, PriorityLow's share
	// of the limit, and when LowAhead is set, the reserve-ahead of a
	// Throttler of their own for the low-priority calls (else they share
	// the high ones').
	HighRate float64        `json:"high_rate,omitempty"`
	LowShare float64        `json:"low_share,omitempty"`
	LowAhead *time.Duration `json:"low_ahead,omitempty"`
	// KindFar: the API's CA certificate (PEM), the client's only root.
	CAPEM []byte `json:"ca_pem,omitempty"`
	// KindRedisFault: each Wait's deadline (0: none).
	WaitTimeout time.Duration `json:"wait_timeout,omitempty"`
	// KindTenants: the tenants (each runs on the replicas its load says),
	// and whether their calls go without their tenant.
	Tenants  []TenantLoad `json:"tenants,omitempty"`
	Untagged bool         `json:"untagged,omitempty"`
	// KindTenants: tenants that come and go besides (see churn.go).
	Churn *TenantChurn `json:"churn,omitempty"`
}

// ReplicaResult is what a replica reports on stdout at the end.
type ReplicaResult struct {
	Index      int     `json:"index"`
	Admitted   int64   `json:"admitted"`    // successful waits, whole run
	Measured   int64   `json:"measured"`    // of which returned at or after Warmup
	WaitNs     []int64 `json:"wait_ns"`     // wait of each measured admission
	PingNs     []int64 `json:"ping_ns"`     // KindLatency: the PING before each measured Wait
	RoundTrips int64   `json:"round_trips"` // Redis round trips of the implementation (hook count)
	Errors     int64   `json:"errors"`      // waits that failed other than by the run ending
	FirstError string  `json:"first_error,omitempty"`
	APIErrors  int64   `json:"api_errors"`
	Unfinished int     `json:"unfinished"` // goroutines still waiting when the run ended
	// KindInFlight: the library's Stats: reservation round trips (RoundTrips
	// counts every round trip, releases and renewals too) and lease waits.
	Reservations int64 `json:"reservations,omitempty"`
	LeaseWaits   int64 `json:"lease_waits,omitempty"`
	// This library's Stats.Sends.LateWakes: calls woken too late for their slot,
	// which gave it back and reserved again (a loaded machine).
	LateWakes int64 `json:"late_wakes,omitempty"`
	// KindStorm: Waits that failed by their deadline (whole run), and of
	// those measured (returned at or after Warmup), how many returned
	// before the deadline, and when each returned, in millionths of its
	// deadline (1,000,000: at the deadline).
	Failed         int64   `json:"failed,omitempty"`
	FailedMeasured int64   `json:"failed_measured,omitempty"`
	FailedEarly    int64   `json:"failed_early,omitempty"`
	FailedAt       []int64 `json:"failed_at_ppm,omitempty"`
	// KindPriority: the high-priority calls (the fields above count both
	// priorities): how many arrived and were admitted (whole run), the
	// waits of those that arrived at or after Warmup and were admitted,
	// and how many were still waiting when the run ended.
	HighArrived    int64   `json:"high_arrived,omitempty"`
	HighAdmitted   int64   `json:"high_admitted,omitempty"`
	HighWaitNs     []int64 `json:"high_wait_ns,omitempty"`
	HighAtNs       []int64 `json:"high_at_ns,omitempty"` // when each of those arrived, after go
	HighUnfinished int     `json:"high_unfinished,omitempty"`
	// ClockSamples are the round trips of the replica's Redis client that
	// carried a TIME (this library's clock samples), as its hook timed
	// them: see metrics.ClockSample.
	ClockSamples []metrics.ClockSample `json:"clock_samples,omitempty"`
	// Stats is this library's Stats at the end, whole (JSON), in the
	// scenarios that report it (Kind.reportsStats): the fields the library
	// adds appear without a change here.
	Stats json.RawMessage `json:"stats,omitempty"`
	// KindFar: every admitted call, and how many the API answered 429.
	Calls  []CallTrace `json:"calls,omitempty"`
	API429 int64       `json:"api_429,omitempty"`
	// KindRedisFault: the failed Waits (Errors) that failed by their
	// deadline and by a Redis timeout, and every failed Wait by message
	// (see FaultRow).
	DeadlineErrors int64        `json:"deadline_errors,omitempty"`
	TimeoutErrors  int64        `json:"timeout_errors,omitempty"`
	ErrorMessages  []ErrorCount `json:"error_messages,omitempty"`
	// KindTenants: each tenant's calls on this replica (the fields above
	// count them all).
	Tenants []TenantResult `json:"tenants,omitempty"`
}

// ReplicaMain runs a replica from the configuration in ReplicaEnv, talking to
// the parent on stdin/stdout, and returns the process exit code.
func ReplicaMain() int {
	var cfg ReplicaConfig
	if err := json.Unmarshal([]byte(os.Getenv(ReplicaEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "replica: bad %s: %v\n", ReplicaEnv, err)
		return 2
	}
	if err := runReplica(context.Background(), cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "replica %d (%s): %v\n", cfg.Index, cfg.Impl, err)
		return 1
	}
	return 0
}

// harnessCall marks a context whose Redis commands are the harness's own
// (the PING of the latency scenario, the readiness check): the round-trip
// hook does not count them.
type harnessCall struct{}

func harnessCtx(ctx context.Context) context.Context {
	return context.WithValue(ctx, harnessCall{}, true)
}

// tripCounter is a go-redis hook counting round trips: one per command sent
// alone, one per pipeline or transaction. It also times those that carry a
// TIME, this library's clock samples: the hook's send and receive enclose
// the server's reading as the library's own do (the library's enclose the
// hook's, and a hand-off to go-redis's goroutine besides, with the default
// client).
type tripCounter struct {
	n atomic.Int64

	mu      sync.Mutex
	samples []metrics.ClockSample
}

// timed runs next, and when cmds hold a TIME that succeeded, notes it as a
// clock sample.
func (c *tripCounter) timed(ctx context.Context, cmds []redis.Cmder, next func() error) error {
	var tc *redis.TimeCmd
	if ctx.Value(harnessCall{}) == nil {
		for _, cmd := range cmds {
			if x, ok := cmd.(*redis.TimeCmd); ok {
				tc = x
				break
			}
		}
	}
	if tc == nil {
		return next()
	}
	sent := time.Now()
	err := next()
	recv := time.Now()
	if tc.Err() == nil && !tc.Val().IsZero() {
		s := metrics.NewClockSample(sent.UnixNano(), recv.UnixNano(), tc.Val().UnixNano())
		c.mu.Lock()
		c.samples = append(c.samples, s)
		c.mu.Unlock()
	}
	return err
}

func (c *tripCounter) count(ctx context.Context, first redis.Cmder) {
	if ctx.Value(harnessCall{}) != nil {
		return
	}
	if name := first.Name(); name == "hello" || name == "client" || name == "auth" || name == "select" {
		return // connection set-up
	}
	c.n.Add(1)
}

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(ctx, cmd)
		return c.timed(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 {
			first := cmds[0]
			if first.Name() == "multi" && len(cmds) > 1 {
				first = cmds[1]
			}
			c.count(ctx, first)
		}
		return c.timed(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

// goroutineLog is one goroutine's record, merged at the end.
type goroutineLog struct {
	admitted, measured, errors, apiErrors int64
	waits, pings                          []int64
	unfinished                            bool
	firstErr                              error
	// KindStorm: Waits failed by their deadline (see ReplicaResult).
	failed, failedMeasured, failedEarly int64
	failedAt                            []int64
	// An open-loop call's (see arrive): when it arrived.
	arrived time.Time
	// KindFar: the admitted calls' traces, and the 429s among them.
	calls  []CallTrace
	api429 int64
	// KindRedisFault: failed Waits by message and kind (see sortError).
	errMsgs map[[2]string]int64
}

func runReplica(ctx context.Context, cfg ReplicaConfig, in io.Reader, out io.Writer) error {
	var rdb *redis.Client
	trips := &tripCounter{}
	if impls.UsesRedis(cfg.Impl) || cfg.Kind == KindLatency {
		opts := &redis.Options{Addr: cfg.RedisAddr}
		impls.ClientOptions(cfg.Impl, opts)
		rdb = redis.NewClient(opts)
		defer rdb.Close()
		rdb.AddHook(trips)
		if err := rdb.Ping(harnessCtx(ctx)).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: idleConns(cfg), IdleConnTimeout: time.Minute},
		Timeout:   10 * time.Second,
	}
	defer client.CloseIdleConnections()
	var (
		w        impls.Waiter
		low      impls.Waiter         // KindPriority: the low-priority calls'
		th       *throttler.Throttler // KindInFlight
		admitted func() uint64        // KindLLM: the calls the Throttlers admitted
	)
	icfg := impls.Config{Key: cfg.Key, Limit: cfg.Limit, Interval: cfg.Interval, Buffer: cfg.Buffer, Procs: cfg.Procs}
	switch cfg.Kind {
	case KindLLM:
		rt, n, err := llmTransport(cfg, rdb, client.Transport)
		if err != nil {
			return err
		}
		client.Transport, admitted = rt, n
		client.Timeout = 0 // a call waits in the Transport for as long as the quota says
	case KindInFlight:
		if !impls.SupportsInFlight(cfg.Impl) {
			return fmt.Errorf("%s has no cap on calls in flight", cfg.Impl)
		}
		var err error
		if th, err = impls.NewInFlight(rdb, icfg, cfg.InFlight, 0); err != nil {
			return err
		}
	case KindPriority:
		var err error
		if w, low, err = priorityWaiters(cfg, rdb, icfg); err != nil {
			return err
		}
	case KindFar:
		var err error
		if client, th, err = farClient(cfg, rdb); err != nil {
			return err
		}
	case KindTenants:
		var err error
		if w, err = tenantWaiter(cfg, rdb, icfg); err != nil {
			return err
		}
	default:
		var err error
		if w, err = impls.New(cfg.Impl, rdb, icfg); err != nil {
			return err
		}
	}

	// Ready; wait for the parent's go, so that every replica starts together.
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for go: %w", err)
	}
	start := time.Now()
	// The run ends by cancellation, not by a deadline: an implementation
	// that refuses a wait whose slot lies beyond its context's deadline
	// would see one, and waits in production rarely have one.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopAt := time.AfterFunc(cfg.Duration, cancel)
	defer stopAt.Stop()
	warmEnd := start.Add(cfg.Warmup)

	logs := make([]*goroutineLog, cfg.Goroutines)
	var wg sync.WaitGroup
	var high []*goroutineLog // KindPriority: one per high-priority arrival
	if cfg.Kind == KindPriority {
		wg.Go(func() { high = loopArrivals(runCtx, cfg, w, client, warmEnd) })
	}
	var tenants []tenantCalls // KindTenants: by tenant
	if cfg.Kind == KindTenants {
		wg.Go(func() { tenants = runTenants(ctx, runCtx, cfg, w, client, warmEnd) })
	}
	for g := range logs {
		l := &goroutineLog{}
		logs[g] = l
		switch cfg.Kind {
		case KindLLM:
			wg.Go(func() { llmLoop(runCtx, cfg, client, uint64(cfg.Index*1000+g), warmEnd, l) })
		case KindInFlight:
			wg.Go(func() { loopInFlight(runCtx, cfg, th, client, warmEnd, l) })
		case KindStorm:
			wg.Go(func() { loopStorm(runCtx, cfg, w, client, warmEnd, l) })
		case KindPriority:
			lowCtx := throttler.ContextWithPriority(runCtx, throttler.PriorityLow)
			wg.Go(func() { loop(lowCtx, cfg, low, rdb, client, warmEnd, l) })
		case KindFar:
			wg.Go(func() { loopFar(runCtx, cfg, client, g, warmEnd, l) })
		case KindRedisFault:
			wg.Go(func() { loopFault(runCtx, cfg, w, client, warmEnd, l) })
		default:
			wg.Go(func() { loop(runCtx, cfg, w, rdb, client, warmEnd, l) })
		}
	}
	wg.Wait()

	res := ReplicaResult{Index: cfg.Index}
	if cfg.Kind.reportsStats() {
		if err := res.addStats(w, th); err != nil {
			return err
		}
	}
	if th != nil && cfg.Kind == KindInFlight {
		// Places granted to calls cancelled at the end go back from the
		// library's keeper goroutine, which nothing public waits for: a
		// moment for it, so that its ZREMs fall inside the run's counts.
		time.Sleep(200 * time.Millisecond)
		st := th.Stats()
		res.Reservations, res.LeaseWaits = int64(st.Redis.RoundTrips), int64(st.Places.Waits)
	}
	if t, ok := w.(*throttler.Throttler); ok {
		res.LateWakes = int64(t.Stats().Sends.LateWakes)
	}
	res.RoundTrips = trips.n.Load()
	trips.mu.Lock()
	res.ClockSamples = trips.samples
	trips.mu.Unlock()
	if admitted != nil {
		res.Admitted = int64(admitted())
	}
	msgs := map[[2]string]int64{}
	for _, l := range logs {
		res.add(l)
		for k, n := range l.errMsgs {
			msgs[k] += n
		}
	}
	res.addErrors(msgs)
	res.addTenants(tenants)
	res.HighArrived = int64(len(high))
	for _, l := range high {
		res.add(l)
		res.HighAdmitted += l.admitted
		res.HighWaitNs = append(res.HighWaitNs, l.waits...)
		if l.measured > 0 {
			res.HighAtNs = append(res.HighAtNs, int64(l.arrived.Sub(start)))
		}
		if l.unfinished {
			res.HighUnfinished++
		}
	}
	return json.NewEncoder(out).Encode(res)
}

// add merges one goroutine's record into the result.
func (res *ReplicaResult) add(l *goroutineLog) {
	res.Admitted += l.admitted
	res.Measured += l.measured
	res.Errors += l.errors
	res.APIErrors += l.apiErrors
	res.WaitNs = append(res.WaitNs, l.waits...)
	res.PingNs = append(res.PingNs, l.pings...)
	res.Failed += l.failed
	res.FailedMeasured += l.failedMeasured
	res.FailedEarly += l.failedEarly
	res.FailedAt = append(res.FailedAt, l.failedAt...)
	if l.unfinished {
		res.Unfinished++
	}
	if l.firstErr != nil && res.FirstError == "" {
		res.FirstError = l.firstErr.Error()
	}
	res.Calls = append(res.Calls, l.calls...)
	res.API429 += l.api429
}

// addErrors lists the failed Waits by message, and counts those that
// failed by their deadline and by a Redis timeout.
func (res *ReplicaResult) addErrors(msgs map[[2]string]int64) {
	for k, n := range msgs {
		res.ErrorMessages = append(res.ErrorMessages, ErrorCount{Message: k[0], Kind: k[1], N: n})
		switch k[1] {
		case errDeadline:
			res.DeadlineErrors += n
		case errRedisTimeout:
			res.TimeoutErrors += n
		}
	}
}

// addStats keeps this library's Stats, whole, when the process waited on
// it (th, or w).
func (res *ReplicaResult) addStats(w impls.Waiter, th *throttler.Throttler) error {
	if th == nil {
		th, _ = w.(*throttler.Throttler)
	}
	if th == nil {
		return nil
	}
	b, err := json.Marshal(th.Stats())
	res.Stats = b
	return err
}

// priorityWaiters builds a KindPriority replica's Throttler for the high-
// priority calls, and the one the low-priority calls wait on: the same,
// or with LowAhead set, one of their own on the same key with that
// reserve-ahead.
func priorityWaiters(cfg ReplicaConfig, rdb *redis.Client, icfg impls.Config) (high, low impls.Waiter, err error) {
	if !impls.SupportsPriority(cfg.Impl) {
		return nil, nil, fmt.Errorf("%s has no priorities", cfg.Impl)
	}
	if high, err = impls.NewPriority(rdb, icfg, cfg.LowShare); err != nil || cfg.LowAhead == nil {
		return high, high, err
	}
	low, err = impls.NewPriority(rdb, icfg, cfg.LowShare, throttler.WithReserveAhead(*cfg.LowAhead))
	return high, low, err
}

// idleConns is how many idle connections to the API a replica keeps: one
// per goroutine, and for KindPriority room for the high-priority calls
// made at once (a few times their rate's share of a second); for
// KindTenants, the same for each tenant on the replica.
func idleConns(cfg ReplicaConfig) int {
	switch cfg.Kind {
	case KindPriority:
		return cfg.Goroutines + int(2*cfg.HighRate) + 4
	case KindTenants:
		return tenantConns(cfg)
	}
	return cfg.Goroutines
}

// loop is one goroutine of a replica: wait, then (when its kind calls the
// API) call the API, until the run's context ends.
func loop(ctx context.Context, cfg ReplicaConfig, w impls.Waiter, rdb *redis.Client, client *http.Client, warmEnd time.Time, l *goroutineLog) {
	for ctx.Err() == nil {
		var ping time.Duration
		if cfg.Kind == KindLatency {
			p0 := time.Now()
			if err := rdb.Ping(harnessCtx(ctx)).Err(); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.errors++
				l.firstErr = firstOf(l.firstErr, err)
				continue
			}
			ping = time.Since(p0)
		}
		w0 := time.Now()
		var score time.Time
		var err error
		if cfg.Kind.callsAPI() {
			score, err = impls.WaitAt(ctx, w)
		} else {
			err = w.Wait(ctx)
		}
		done := time.Now()
		if err != nil {
			if l.waitFailed(ctx, err) {
				return
			}
			continue
		}
		if l.admit(w0, done, warmEnd) && cfg.Kind == KindLatency {
			l.pings = append(l.pings, int64(ping))
		}
		if cfg.Kind.callsAPI() {
			l.called(callFor(client, cfg, tenantLabel(ctx), score, w0, done))
		}
	}
}

// waitFailed notes a wait that returned err, and reports whether the run
// is over.
func (l *goroutineLog) waitFailed(ctx context.Context, err error) (over bool) {
	if ctx.Err() != nil {
		l.unfinished = true
		return true
	}
	l.errors++
	l.firstErr = firstOf(l.firstErr, err)
	time.Sleep(10 * time.Millisecond) // do not spin on a broken Redis
	return false
}

// admit notes a wait from w0 that admitted its call at done, and reports
// whether it is measured (it returned after the warm-up).
func (l *goroutineLog) admit(w0, done, warmEnd time.Time) (measured bool) {
	return l.record(w0, done, !done.Before(warmEnd))
}

// record notes a wait from w0 that admitted its call at done, and its
// length when measured; it returns measured.
func (l *goroutineLog) record(w0, done time.Time, measured bool) bool {
	l.admitted++
	if measured {
		l.measured++
		l.waits = append(l.waits, int64(done.Sub(w0)))
	}
	return measured
}

// called notes the API call's outcome.
func (l *goroutineLog) called(err error) {
	if err != nil {
		l.apiErrors++
		l.firstErr = firstOf(l.firstErr, err)
	}
}

// loopInFlight is one goroutine of a KindInFlight replica: Do(call the
// API) until the run's context ends. The wait is from Do until fn starts.
func loopInFlight(ctx context.Context, cfg ReplicaConfig, th *throttler.Throttler, client *http.Client, warmEnd time.Time, l *goroutineLog) {
	for ctx.Err() == nil {
		w0 := time.Now()
		var began time.Time
		err := th.Do(ctx, func(context.Context) error {
			began = time.Now()
			return call(client, cfg, time.Time{}, w0, began)
		})
		if began.IsZero() { // not admitted
			if l.waitFailed(ctx, err) {
				return
			}
			continue
		}
		l.admit(w0, began, warmEnd)
		l.called(err)
	}
}

// loopStorm is one goroutine of a KindStorm replica: a Wait with a
// deadline drawn in [DeadlineMin, DeadlineMax], then the API call if it was
// admitted; a Wait that failed before its deadline is followed by a sleep
// until the deadline, as a caller would have waited that long, until the
// run's context ends.
func loopStorm(ctx context.Context, cfg ReplicaConfig, w impls.Waiter, client *http.Client, warmEnd time.Time, l *goroutineLog) {
	for ctx.Err() == nil {
		d := cfg.DeadlineMin + rand.N(cfg.DeadlineMax-cfg.DeadlineMin+1)
		w0 := time.Now()
		deadline := w0.Add(d)
		wctx, cancel := context.WithDeadline(ctx, deadline)
		score, err := impls.WaitAt(wctx, w)
		cancel()
		done := time.Now()
		switch {
		case err == nil:
			l.admit(w0, done, warmEnd)
			l.called(call(client, cfg, score, w0, done))
		case ctx.Err() != nil:
			l.unfinished = true
			return
		case errors.Is(err, context.DeadlineExceeded):
			l.refused(w0, done, d, warmEnd)
			sleepCtx(ctx, deadline.Sub(done))
		default:
			if l.waitFailed(ctx, err) {
				return
			}
		}
	}
}

// loopArrivals starts a high-priority call at each of the Poisson arrivals
// of cfg.HighRate a second, in a goroutine of its own (arrive), until ctx
// ends, and returns their records once every call has returned. Arrival
// times are drawn ahead, so a late wake does not slow the rate.
func loopArrivals(ctx context.Context, cfg ReplicaConfig, w impls.Waiter, client *http.Client, warmEnd time.Time) []*goroutineLog {
	high := throttler.ContextWithPriority(ctx, throttler.PriorityHigh)
	gap := func() time.Duration { return time.Duration(rand.ExpFloat64() / cfg.HighRate * float64(time.Second)) }
	return openLoop(ctx, high, gap(), gap, cfg, w, client, warmEnd)
}

// openLoop starts a call on callCtx (arrive) first from now, then gap()
// after the one before, each in a goroutine of its own, until ctx ends,
// and returns their records once every call has returned. Arrival times
// are drawn ahead, so a late wake does not slow the rate.
func openLoop(ctx, callCtx context.Context, first time.Duration, gap func() time.Duration, cfg ReplicaConfig, w impls.Waiter, client *http.Client, warmEnd time.Time) []*goroutineLog {
	var logs []*goroutineLog
	var wg sync.WaitGroup
	for at := time.Now().Add(first); ; at = at.Add(gap()) {
		if sleepCtx(ctx, time.Until(at)); ctx.Err() != nil {
			break
		}
		l := &goroutineLog{}
		logs = append(logs, l)
		wg.Go(func() { arrive(callCtx, cfg, w, client, warmEnd, l) })
	}
	wg.Wait()
	return logs
}

// arrive is one open-loop call: Wait, then call the API if admitted. Its
// wait is measured when it arrived after the warm-up (not when it
// returned: a call that arrived during the warm-up waited for it).
func arrive(ctx context.Context, cfg ReplicaConfig, w impls.Waiter, client *http.Client, warmEnd time.Time, l *goroutineLog) {
	l.arrived = time.Now()
	score, err := impls.WaitAt(ctx, w)
	if err != nil {
		l.waitFailed(ctx, err)
		return
	}
	done := time.Now()
	l.record(l.arrived, done, !l.arrived.Before(warmEnd))
	l.called(callFor(client, cfg, tenantLabel(ctx), score, l.arrived, done))
}

// refused notes a Wait from w0 with deadline d that failed by its deadline
// at done.
func (l *goroutineLog) refused(w0, done time.Time, d time.Duration, warmEnd time.Time) {
	l.failed++
	if done.Before(warmEnd) {
		return
	}
	l.failedMeasured++
	took := done.Sub(w0)
	if took < d {
		l.failedEarly++
	}
	l.failedAt = append(l.failedAt, int64(took)*1_000_000/int64(d))
}

// sleepCtx sleeps d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// call makes the API call: not bound to the run's context, so that a call
// admitted just before the end is still made (it was counted). Its headers
// carry the replica, score (the server time the call was counted at; zero:
// not known), when its Wait began and returned, and the moment it is sent.
func call(client *http.Client, cfg ReplicaConfig, score, started, returned time.Time) error {
	return callFor(client, cfg, "", score, started, returned)
}

// callFor is call for tenant, which its headers name too ("": none).
func callFor(client *http.Client, cfg ReplicaConfig, tenant string, score, started, returned time.Time) error {
	req, err := http.NewRequest(http.MethodGet, cfg.APIURL, nil)
	if err != nil {
		return err
	}
	req.Header.Set(fakeapi.ReplicaHeader, strconv.Itoa(cfg.Index))
	if tenant != "" {
		req.Header.Set(fakeapi.TenantHeader, tenant)
	}
	if !score.IsZero() {
		req.Header.Set(fakeapi.ScoreHeader, strconv.FormatInt(score.UnixMicro(), 10))
	}
	req.Header.Set(fakeapi.StartedHeader, strconv.FormatInt(started.UnixNano(), 10))
	req.Header.Set(fakeapi.ReturnedHeader, strconv.FormatInt(returned.UnixNano(), 10))
	req.Header.Set(fakeapi.SentHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New("api: " + resp.Status)
	}
	return nil
}

func firstOf(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
