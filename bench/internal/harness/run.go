package harness

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler/bench/internal/fakeapi"
	"github.com/go-throttler/throttler/bench/internal/impls"
	"github.com/go-throttler/throttler/bench/internal/metrics"
	"github.com/go-throttler/throttler/bench/internal/redisserver"
	"github.com/go-throttler/throttler/internal/fakellm"
	"github.com/redis/go-redis/v9"
)

// Options configure Run.
type Options struct {
	Scenarios []Scenario    // what to run, in order
	Buffer    time.Duration // the throttler's and the seed's buffer
	Quick     bool          // recorded in the report
	// Calls lists every call that reached the API in each row's
	// attribution (AttribRow.CallList), not only those of the windows over
	// the limit.
	Calls bool
	// Runs is how many times each scenario runs with each of its
	// implementations (0 means once): run 1 of every scenario and
	// implementation, then run 2, and so on, each from a FLUSHALL.
	Runs int
	// LowShare is PriorityLow's share of the limit in the priority
	// scenarios (WithPriorityShare); 0 means the library's default, 0.9.
	LowShare float64
	// LowAhead, when set, gives the low-priority calls of the priority
	// scenarios a Throttler of their own in each process, with this
	// reserve-ahead (WithReserveAhead); else they share the high ones'.
	LowAhead *time.Duration
	// Exe is the binary re-executed as a replica (with ReplicaFlag and
	// ReplicaEnv); default os.Executable(). It must call ReplicaMain when
	// ReplicaEnv is set.
	Exe string
	// Progress receives a line per run; nil discards.
	Progress io.Writer
	// Stderr receives the replicas' stderr; nil means os.Stderr.
	Stderr io.Writer
}

type harness struct {
	opt   Options
	redis *redisserver.Server
	rdb   *redis.Client
	api   *fakeapi.Server
}

// Run starts a redis-server and the fake API, runs every scenario for each of
// its implementations, stops everything and returns the report. When ctx
// ends, the replicas are killed and the server stopped before Run returns.
func Run(ctx context.Context, opt Options) (*Report, error) {
	if opt.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		opt.Exe = exe
	}
	if opt.Progress == nil {
		opt.Progress = io.Discard
	}
	if opt.Stderr == nil {
		opt.Stderr = os.Stderr
	}
	srv, err := redisserver.Start(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	api, err := fakeapi.Start()
	if err != nil {
		return nil, err
	}
	defer api.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	h := &harness{opt: opt, redis: srv, rdb: rdb, api: api}

	rep := &Report{Meta: Meta{
		Started:      time.Now().UTC().Format(time.RFC3339),
		GoVersion:    runtime.Version(),
		OS:           runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:         runtime.NumCPU(),
		RedisVersion: srv.Version,
		Quick:        opt.Quick,
		BufferMs:     ms(opt.Buffer),
		Runs:         max(opt.Runs, 1),
	}}
	runs := rep.Meta.Runs
	total := 0
	for _, sc := range opt.Scenarios {
		total += len(sc.Impls)
		rep.Scenarios = append(rep.Scenarios, ScenarioInfo{
			Name: sc.Name, Kind: sc.Kind, Procs: sc.Procs, Goroutines: sc.Goroutines, Limit: sc.Limit,
			IntervalMs: ms(sc.Interval), DurationS: sc.Duration.Seconds(), WarmupS: sc.Warmup.Seconds(),
			Calls: sc.Calls, Impls: sc.Impls, Description: sc.String(),
		})
	}
	total *= runs
	n := 0
	for run := 1; run <= runs; run++ {
		for _, sc := range opt.Scenarios {
			for _, impl := range sc.Impls {
				n++
				what := fmt.Sprintf("%s/%s", sc.Name, impl)
				if runs > 1 {
					what += fmt.Sprintf(" run %d", run)
				}
				fmt.Fprintf(opt.Progress, "[%2d/%d] %-8s %-10s ", n, total, sc.Name, impl)
				if runs > 1 {
					fmt.Fprintf(opt.Progress, "run %-2d ", run)
				}
				began := time.Now()
				summary, err := h.runOne(ctx, sc, impl, run, rep)
				if err != nil {
					fmt.Fprintln(opt.Progress, "failed")
					return nil, fmt.Errorf("%s: %w", what, err)
				}
				fmt.Fprintf(opt.Progress, "%5.1fs  %s\n", time.Since(began).Seconds(), summary)
			}
		}
	}
	if runs > 1 {
		rep.Summary = summarize(rep.Rows)
	}
	rep.TenantTargets = tenantTargets(rep.Rows)
	return rep, nil
}

// runOne runs scenario sc once (run) for impl, adds its figures to rep,
// and returns a line that sums them up.
func (h *harness) runOne(ctx context.Context, sc Scenario, impl string, run int, rep *Report) (string, error) {
	switch sc.Kind {
	case KindKeys:
		k, err := h.runKeys(ctx, sc, impl)
		if err != nil {
			return "", err
		}
		k.Run = run
		rep.Keys = append(rep.Keys, k)
		return fmt.Sprintf("%.0f bytes/key after one call, %.0f after %d", k.BytesFirst, k.BytesAll, k.Calls), nil
	case KindMemory:
		m, err := h.runMemory(ctx, sc, impl)
		if err != nil {
			return "", err
		}
		m.Run = run
		rep.Memory = append(rep.Memory, m)
		return fmt.Sprintf("%d members, %d bytes (%.1f/member)", m.Members, m.Bytes, m.BytesPerMember), nil
	}
	row, lat, err := h.runReplicas(ctx, sc, impl)
	if err != nil {
		return "", err
	}
	row.Run = run
	rep.Rows = append(rep.Rows, row)
	if lat != nil {
		lat.Run = run
		rep.Latency = append(rep.Latency, *lat)
	}
	return row.summary(), nil
}

// replica is a running replica process.
type replica struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan error
	result chan replicaOutcome
	exited chan struct{}
}

type replicaOutcome struct {
	res ReplicaResult
	err error
}

func (h *harness) spawn(ctx context.Context, cfg ReplicaConfig) (*replica, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, h.opt.Exe, ReplicaFlag)
	cmd.Env = append(os.Environ(), ReplicaEnv+"="+string(b))
	cmd.Stderr = h.opt.Stderr
	cmd.WaitDelay = 5 * time.Second
	redisserver.Configure(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &replica{cmd: cmd, stdin: stdin, ready: make(chan error, 1), result: make(chan replicaOutcome, 1), exited: make(chan struct{})}
	go func() {
		rd := bufio.NewReader(stdout)
		line, err := rd.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != "ready" {
			r.ready <- fmt.Errorf("replica %d did not get ready (read %q, %v)", cfg.Index, line, err)
			return
		}
		r.ready <- nil
		var res ReplicaResult
		if err := json.NewDecoder(rd).Decode(&res); err != nil {
			r.result <- replicaOutcome{err: fmt.Errorf("replica %d: reading its result: %w", cfg.Index, err)}
			return
		}
		r.result <- replicaOutcome{res: res}
	}()
	return r, nil
}

// stop kills the replica if it still runs and reaps it.
func (r *replica) stop() {
	if r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
}

func (h *harness) runReplicas(ctx context.Context, sc Scenario, impl string) (Row, *LatencyRow, error) {
	if err := h.rdb.FlushAll(ctx).Err(); err != nil {
		return Row{}, nil, err
	}
	h.api.Take()
	h.api.Stalls()
	if sc.Kind == KindInFlight {
		h.api.SetInFlight(sc.InFlight, sc.HoldMin, sc.HoldMax)
		defer h.api.SetInFlight(0, 0, 0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	apiURL := h.api.URL
	var llm *fakellm.API
	if sc.Kind == KindLLM {
		api, url, stop, err := startLLM(sc)
		if err != nil {
			return Row{}, nil, err
		}
		defer stop()
		llm, apiURL = api, url
	}
	var far *farRun
	if sc.Kind == KindFar {
		var err error
		if far, err = startFar(sc); err != nil {
			return Row{}, nil, err
		}
		defer far.close()
	}
	var faults *faultRun
	if sc.Kind == KindRedisFault {
		var err error
		if faults, err = startFaults(sc.Fault, h.redis.Addr, sc.Procs); err != nil {
			return Row{}, nil, err
		}
		defer faults.close()
	}

	reps := make([]*replica, sc.Procs)
	defer func() {
		for _, r := range reps {
			if r != nil {
				r.stop()
			}
		}
	}()
	key := "bench:" + sc.Name
	for i := range reps {
		cfg := ReplicaConfig{
			Index: i, Impl: impl, Kind: sc.Kind, RedisAddr: h.redis.Addr, Key: key,
			Limit: sc.Limit, Interval: sc.Interval, Buffer: h.opt.Buffer, Procs: sc.Procs,
			Goroutines: sc.Goroutines, Duration: sc.Duration, Warmup: sc.Warmup, APIURL: apiURL,
			Requests: sc.Requests, Unit: sc.Unit, InFlight: sc.InFlight,
			DeadlineMin: sc.DeadlineMin, DeadlineMax: sc.DeadlineMax,
			HighRate: sc.HighRate, LowShare: h.lowShare(), LowAhead: h.opt.LowAhead,
			WaitTimeout: sc.WaitTimeout, Tenants: sc.Tenants, Untagged: sc.Untagged, Churn: sc.Churn,
		}
		far.configure(&cfg)
		faults.configure(&cfg)
		r, err := h.spawn(ctx, cfg)
		if err != nil {
			return Row{}, nil, err
		}
		reps[i] = r
	}
	for _, r := range reps {
		if err := await(ctx, r.ready, 60*time.Second, "replica start"); err != nil {
			return Row{}, nil, err
		}
	}

	before, err := redisserver.Take(ctx, h.rdb)
	if err != nil {
		return Row{}, nil, err
	}
	t0 := time.Now()
	mem := startMemory(ctx, sc, h.rdb, key, t0)
	far.start(h.rdb, key, t0)
	faults.run()
	for i, r := range reps {
		if d := startsAt(sc, i); d > 0 {
			// A process joining later: told to go then (it runs until the
			// others end). Should the write fail, its result never comes,
			// and the wait for it below says so.
			join := time.AfterFunc(d, func() { _, _ = io.WriteString(r.stdin, "go\n") })
			defer join.Stop()
			continue
		}
		if _, err := io.WriteString(r.stdin, "go\n"); err != nil {
			return Row{}, nil, fmt.Errorf("starting replica: %w", err)
		}
	}
	results := make([]ReplicaResult, len(reps))
	for i, r := range reps {
		var out replicaOutcome
		select {
		case out = <-r.result:
		case <-time.After(time.Until(t0.Add(sc.Duration + 60*time.Second))):
			out.err = fmt.Errorf("replica %d did not report within a minute of the run's end", i)
		case <-ctx.Done():
			out.err = ctx.Err()
		}
		if out.err != nil {
			return Row{}, nil, out.err
		}
		results[i] = out.res
		if err := r.cmd.Wait(); err != nil {
			return Row{}, nil, fmt.Errorf("replica %d: %w", i, err)
		}
	}
	samples := mem.stop()
	after, err := redisserver.Take(ctx, h.rdb)
	if err != nil {
		return Row{}, nil, err
	}
	arrivals := h.api.Take()
	stalls := h.api.Stalls()
	var (
		adm      []Admission
		prefixes map[int]string
	)
	if far != nil {
		if arrivals, stalls, adm, prefixes, err = far.take(results, h.opt.Buffer); err != nil {
			return Row{}, nil, fmt.Errorf("reading the admissions: %w", err)
		}
	}
	row, lat := compute(sc, impl, h.opt.Buffer, h.opt.Calls, t0, results, arrivals, stalls, before, after)
	if far != nil {
		row.Far = farFigures(sc, h.opt.Buffer, t0, arrivals, results, adm, prefixes)
		row.Utilization = ptr(row.Far.UtilAfter)
		row.AdmittedPerSec = row.Far.UtilAfter * float64(sc.Limit) / sc.Interval.Seconds()
	}
	if faults != nil {
		row.Fault = faultFigures(sc, row, results, faults.close())
	}
	if sc.Churn != nil && row.Tenants != nil {
		row.Tenants.Churn = churnFigures(sc, t0, samples, arrivals, results)
	}
	if sc.Kind.reportsStats() {
		row.Stats = make([]json.RawMessage, sc.Procs)
		for _, r := range results {
			if r.Index >= 0 && r.Index < sc.Procs {
				row.Stats[r.Index] = r.Stats
			}
		}
	}
	if row.Priority != nil {
		row.Priority.LowShare = h.lowShare()
		if h.opt.LowAhead != nil {
			row.Priority.LowAheadMs = ptr(ms(*h.opt.LowAhead))
		}
	}
	if llm != nil {
		fillLLM(&row, sc, t0, llm)
	}
	return row, lat, nil
}

// defaultLowShare is the library's default share of PriorityLow.
const defaultLowShare = 0.9

// lowShare is PriorityLow's share in the priority scenarios.
func (h *harness) lowShare() float64 {
	if h.opt.LowShare == 0 {
		return defaultLowShare
	}
	return h.opt.LowShare
}

func await(ctx context.Context, ch <-chan error, d time.Duration, what string) error {
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		return fmt.Errorf("%s: timed out after %s", what, d)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// compute turns one run's raw results into its row.
func compute(sc Scenario, impl string, buffer time.Duration, allCalls bool, t0 time.Time, results []ReplicaResult, arrivals []fakeapi.Arrival,
	stalls []fakeapi.Stall, before, after redisserver.Snapshot) (Row, *LatencyRow) {
	row := Row{
		Scenario: sc.Name, Impl: impl, Procs: sc.Procs, Goroutines: sc.Goroutines,
		Limit: sc.Limit, IntervalMs: ms(sc.Interval), DurationS: sc.Duration.Seconds(),
	}
	var waits, pings []int64
	perProc := make([]float64, sc.Procs)
	row.PerProcRoundTrips = make([]int64, sc.Procs)
	row.PerProcLateWakes = make([]int64, sc.Procs)
	var trips, reservations, leaseWaits int64
	for _, r := range results {
		reservations += r.Reservations
		leaseWaits += r.LeaseWaits
		row.Admitted += r.Admitted
		row.Measured += r.Measured
		row.Errors += r.Errors
		row.APIErrors += r.APIErrors
		row.Unfinished += r.Unfinished
		if r.FirstError != "" && row.FirstError == "" {
			row.FirstError = r.FirstError
		}
		trips += r.RoundTrips
		waits = append(waits, r.WaitNs...)
		pings = append(pings, r.PingNs...)
		if r.Index >= 0 && r.Index < len(perProc) {
			perProc[r.Index] = float64(r.Measured)
			row.PerProcRoundTrips[r.Index] = r.RoundTrips
			row.PerProcLateWakes[r.Index] = r.LateWakes
		}
	}
	span := (sc.Duration - sc.Warmup).Seconds()
	row.AdmittedPerSec = float64(row.Measured) / span

	if sc.Kind == KindInFlight {
		row.InFlight = inFlightFigures(sc, t0, arrivals, reservations, leaseWaits, row.Admitted)
		arrivals = slices.DeleteFunc(arrivals, func(a fakeapi.Arrival) bool { return a.OverCap })
	}
	if sc.Kind.callsAPI() {
		ts := make([]int64, len(arrivals))
		clear(perProc)
		from, to := int64(sc.Warmup), int64(sc.Duration)
		row.PerProcPerInterval = make([][]int, sc.Procs)
		intervals := int((sc.Duration + sc.Interval - 1) / sc.Interval)
		for i := range row.PerProcPerInterval {
			row.PerProcPerInterval[i] = make([]int, intervals)
		}
		for i, a := range arrivals {
			ts[i] = int64(a.At.Sub(t0))
			if a.Replica < 0 || a.Replica >= len(perProc) {
				continue
			}
			if ts[i] >= from && ts[i] < to {
				perProc[a.Replica]++
			}
			if k := ts[i] / int64(sc.Interval); k >= 0 && k < int64(intervals) {
				row.PerProcPerInterval[a.Replica][k]++
			}
		}
		w := int64(sc.Interval)
		row.APICalls = len(ts)
		row.APICallsMeasured = metrics.CountIn(ts, from, to)
		// The rate is the sliding window's average fill over [Warmup,
		// Duration) per interval: the same as counting calls over the span
		// for an even flow, without the ±1 burst a bursty one gains or
		// loses at the span's edges.
		mean := metrics.MeanInWindow(ts, w, from, to)
		row.AdmittedPerSec = mean / sc.Interval.Seconds()
		row.Utilization = ptr(mean / float64(sc.Limit))
		row.MaxInWindow = ptr(metrics.MaxInWindow(ts, w))
		row.StrictRejects = ptr(metrics.StrictRejects(ts, sc.Limit, w))
		row.SeriesStepMs = seriesStep.Milliseconds()
		row.Series = metrics.Rolling(ts, w, int64(seriesStep), int64(sc.Duration))
		row.Attrib = attribution(sc, buffer, t0, arrivals, stalls, results, allCalls)
	}
	for _, c := range perProc {
		row.PerProc = append(row.PerProc, int64(c))
	}
	if sc.Procs > 1 {
		row.Jain = ptr(metrics.Jain(perProc))
	}

	cmds, total, cpu := redisserver.Delta(before, after)
	row.Commands = cmds
	if sc.Kind == KindStorm {
		row.Storm = stormFigures(results, row.Admitted, trips)
	}
	if sc.Kind == KindPriority {
		row.Priority = priorityFigures(sc, results, row.Admitted)
	}
	if sc.Kind == KindTenants {
		row.Tenants = tenantFigures(sc, t0, results, arrivals)
	}
	if row.Admitted > 0 {
		a := float64(row.Admitted)
		row.RoundTripsPerAdm = float64(trips) / a
		row.CommandsPerAdm = float64(total) / a
		row.RedisCPUUsPerAdm = float64(cpu.Microseconds()) / a
	}
	row.RoundTrips = trips
	row.RedisCPUMs = float64(cpu.Microseconds()) / 1000

	slicesSort(waits)
	row.WaitP50Ms = ms(time.Duration(metrics.PercentileSorted(waits, 50)))
	row.WaitP99Ms = ms(time.Duration(metrics.PercentileSorted(waits, 99)))

	if sc.Kind != KindLatency {
		return row, nil
	}
	slicesSort(pings)
	lat := &LatencyRow{
		Impl:      impl,
		Samples:   len(waits),
		PingP50Us: us(metrics.PercentileSorted(pings, 50)),
		PingP99Us: us(metrics.PercentileSorted(pings, 99)),
		WaitP50Us: us(metrics.PercentileSorted(waits, 50)),
		WaitP99Us: us(metrics.PercentileSorted(waits, 99)),
	}
	if lat.PingP50Us > 0 {
		lat.RatioP50 = lat.WaitP50Us / lat.PingP50Us
	}
	return row, lat
}

// inFlightFigures measures, at the API, the calls in flight of a
// KindInFlight run: the most at once (a refused arrival counted with the
// calls held then), the time-weighted mean over [Warmup, Duration), the
// refusals; and the library's own counts per admission.
func inFlightFigures(sc Scenario, t0 time.Time, arrivals []fakeapi.Arrival, reservations, leaseWaits, admitted int64) *InFlightRow {
	end := t0.Add(sc.Duration + time.Hour) // a call still held at the end
	var spans []metrics.Span
	var refused []int64
	for _, a := range arrivals {
		if a.OverCap {
			refused = append(refused, int64(a.At.Sub(t0)))
			continue
		}
		e := a.End
		if e.IsZero() {
			e = end
		}
		spans = append(spans, metrics.Span{Start: int64(a.At.Sub(t0)), End: int64(e.Sub(t0))})
	}
	f := &InFlightRow{Cap: sc.InFlight, OverCap: len(refused), Max: metrics.MaxConcurrent(spans), LeaseWaits: leaseWaits, Reservations: reservations}
	for _, at := range refused {
		f.Max = max(f.Max, 1+metrics.MaxConcurrent(slices.DeleteFunc(slices.Clone(spans), func(s metrics.Span) bool {
			return s.Start > at || s.End <= at
		})))
	}
	f.Mean = metrics.MeanConcurrent(spans, int64(sc.Warmup), int64(sc.Duration))
	if sc.InFlight > 0 {
		f.Utilization = f.Mean / float64(sc.InFlight)
	}
	if admitted > 0 {
		f.LeaseWaitsPerAdm = float64(leaseWaits) / float64(admitted)
		f.ReservationsPerAdm = float64(reservations) / float64(admitted)
	}
	return f
}

// stormFigures sums the failed Waits of a KindStorm run and says how soon
// they returned, relative to their deadlines.
func stormFigures(results []ReplicaResult, admitted, trips int64) *StormRow {
	f := &StormRow{Admitted: admitted}
	var at []int64
	for _, r := range results {
		f.Failed += r.Failed
		f.FailedMeasured += r.FailedMeasured
		f.FailedEarly += r.FailedEarly
		at = append(at, r.FailedAt...)
	}
	f.WaitCalls = admitted + f.Failed
	if f.WaitCalls > 0 {
		f.RoundTripsPerWait = float64(trips) / float64(f.WaitCalls)
	}
	if f.FailedMeasured > 0 {
		f.EarlyShare = float64(f.FailedEarly) / float64(f.FailedMeasured)
	}
	slicesSort(at)
	f.FailedAtP50 = float64(metrics.PercentileSorted(at, 50)) / 1e6
	f.FailedAtP99 = float64(metrics.PercentileSorted(at, 99)) / 1e6
	return f
}

// priorityFigures sums the high-priority calls of a KindPriority run and
// the low-priority ones (the rest of its admissions), and gives the high
// ones' waits.
func priorityFigures(sc Scenario, results []ReplicaResult, admitted int64) *PriorityRow {
	f := &PriorityRow{}
	var waits []int64
	var measured int64
	for _, r := range results {
		f.HighArrived += r.HighArrived
		f.HighAdmitted += r.HighAdmitted
		f.HighUnfinished += r.HighUnfinished
		waits = append(waits, r.HighWaitNs...)
		measured += r.Measured
		for i, at := range r.HighAtNs {
			f.High = append(f.High, HighCall{Replica: r.Index, AtMs: ms(time.Duration(at)), WaitMs: ms(time.Duration(r.HighWaitNs[i]))})
		}
	}
	slices.SortFunc(f.High, func(a, b HighCall) int { return cmp.Compare(a.AtMs, b.AtMs) })
	f.LowAdmitted = admitted - f.HighAdmitted
	f.HighMeasured = len(waits)
	span := (sc.Duration - sc.Warmup).Seconds()
	f.LowPerSec = float64(measured-int64(len(waits))) / span
	slicesSort(waits)
	f.HighP50Ms = ms(time.Duration(metrics.PercentileSorted(waits, 50)))
	f.HighP99Ms = ms(time.Duration(metrics.PercentileSorted(waits, 99)))
	if len(waits) > 0 {
		f.HighMaxMs = ms(time.Duration(waits[len(waits)-1]))
	}
	return f
}

// seriesStep is the sampling step of the rolling window count in the chart.
const seriesStep = 25 * time.Millisecond

// memoryKey is the key the memory scenario fills.
const memoryKey = "bench:memory"

// runMemory admits sc.Calls calls in one window with sc.Goroutines
// goroutines in this process, then measures the key.
func (h *harness) runMemory(ctx context.Context, sc Scenario, impl string) (MemoryRow, error) {
	if err := h.rdb.FlushAll(ctx).Err(); err != nil {
		return MemoryRow{}, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: h.redis.Addr})
	defer rdb.Close()
	w, err := impls.New(impl, rdb, impls.Config{
		Key: memoryKey, Limit: sc.Limit, Interval: sc.Interval, Buffer: h.opt.Buffer, Procs: 1,
	})
	if err != nil {
		return MemoryRow{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute+sc.Rest)
	defer cancel()
	began := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, sc.Goroutines)
	for g := range sc.Goroutines {
		wg.Go(func() {
			for next.Add(1) <= int64(sc.Calls) {
				if err := w.Wait(ctx); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return MemoryRow{}, err
	}
	elapsed := time.Since(began)

	row := MemoryRow{Impl: impl, Calls: sc.Calls, AdmitSeconds: elapsed.Seconds()}
	if row.Members, row.Keys, row.Bytes, err = h.measureMemory(ctx); err != nil {
		return row, err
	}
	if row.Members > 0 {
		row.BytesPerMember = float64(row.Bytes) / float64(row.Members)
	}
	if sc.Rest > 0 {
		select {
		case <-time.After(sc.Rest):
		case <-ctx.Done():
			return row, ctx.Err()
		}
		// A quota of a million a day sees a dozen calls a second: a
		// compaction that stops at its batch carries on with the next.
		for range restCalls {
			if err := w.Wait(ctx); err != nil {
				return row, err
			}
			time.Sleep(100 * time.Millisecond)
		}
		row.RestSeconds = sc.Rest.Seconds()
		if row.RestMembers, _, row.RestBytes, err = h.measureMemory(ctx); err != nil {
			return row, err
		}
	}
	return row, nil
}

// restCalls is how many calls, 100ms apart, the memory scenario makes
// after its Rest before measuring again.
const restCalls = 12

// measureMemory reads the memory key's members (ZCARD), how many keys
// Redis holds, and their MEMORY USAGE summed.
func (h *harness) measureMemory(ctx context.Context) (members int64, nkeys int, bytes int64, err error) {
	if members, err = h.rdb.ZCard(ctx, memoryKey).Result(); err != nil {
		return 0, 0, 0, err
	}
	keys, err := h.rdb.Keys(ctx, "*").Result()
	if err != nil {
		return 0, 0, 0, err
	}
	for _, k := range keys {
		n, err := h.rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("MEMORY USAGE %s: %w", k, err)
		}
		bytes += n
	}
	return members, len(keys), bytes, nil
}
