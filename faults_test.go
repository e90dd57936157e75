package throttler

// Fault injection against real redis-server processes the tests start and
// control, with replicas that are real OS processes: the test binary
// re-executed as a replica (see init and replicaMain), killed with SIGKILL
// at random moments or by itself in the middle of a reservation.
//
// Every test checks the guarantee twice: over the admission scores the
// replicas report (no window of interval+buffer holds more than limit), and at
// a strict fake API (no window of interval holds more than limit arrivals,
// and none was refused). Every Wait is accounted for (admitted, or an error
// that is ErrRedis or the context's), and no request reaches the API twice.
// Each test logs its measured outcome in one line starting with "outcome:".

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/fakeapi"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/go-throttler/throttler/internal/replica"
	"github.com/redis/go-redis/v9"
)

// The test binary doubles as the replica program: run with
// THROTTLER_REPLICA=1 it runs one replica and exits before any test (and
// before TestMain's leak check) runs.
func init() {
	if os.Getenv(replica.ModeEnv) != "1" {
		return
	}
	os.Exit(replicaMain())
}

// requestIDHeader tags every request a replica sends with a unique id, so the
// API side can tell a request received twice.
const requestIDHeader = "X-Request-Id"

// replicaMain runs one replica: G goroutines loop Wait then GET (or a GET
// through the Throttler's RoundTripper) against the fake API until stdin
// closes, reporting every event on stdout, one line per os.Stdout.Write.
func replicaMain() int {
	cfg, err := replica.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	out := newReplicaOut()
	client := redis.NewClient(&redis.Options{Addr: cfg.Addr})
	defer client.Close()
	opts := []Option{
		WithBuffer(cfg.Buffer),
		WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
	if skew := cfg.Skew; skew != 0 {
		opts = append(opts, WithClock(func() time.Time { return time.Now().Add(skew) }))
	}
	if cfg.RedisTimeout > 0 {
		opts = append(opts, WithRedisTimeout(cfg.RedisTimeout))
	}
	th, err := New(client, cfg.Key, cfg.Limit, cfg.Interval, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	// The hooks run under th.mu: they only queue a line.
	th.onAdmit = func(score int64, members []string) { out.add(replica.AdmitLine(score, members)) }
	th.onRelease = func(members []string) { out.add(replica.ReleaseLine(members)) }
	if cfg.KillMid > 0 {
		events := 0
		th.onResolved = func(rejected int) {
			if rejected == 0 {
				return
			}
			if events++; events < cfg.KillMid {
				return
			}
			// Rejected claims' members are in Redis, to be given back with
			// the next round trip, which never comes.
			out.last(replica.KillMidLine(rejected))
			if p, err := os.FindProcess(os.Getpid()); err == nil && p.Kill() == nil { // SIGKILL
				time.Sleep(time.Hour) // holding th.mu until the signal lands
			}
			os.Exit(3) // could not kill itself: the parent reports a crash
		}
	}
	out.add(replica.StartLine(os.Getpid(), th.ids.prefix[:]))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stopping atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it (or dies)
		stopping.Store(true)
		if cfg.RoundTripper {
			// A call through the RoundTripper is cancelled with its wait;
			// let the calls finish rather than cut requests in flight.
			time.Sleep(3 * time.Second)
		}
		cancel()
	}()

	var plain, throttled *http.Client
	if cfg.RoundTripper {
		throttled = &http.Client{Transport: th.RoundTripper(nil)}
	} else {
		plain = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
		defer plain.CloseIdleConnections()
	}
	var started, returned atomic.Int64
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; !stopping.Load() && ctx.Err() == nil; seq++ {
				id := fmt.Sprintf("%s-%d-%d", cfg.ID, g, seq)
				started.Add(1)
				var err error
				if cfg.RoundTripper {
					err = replicaGet(ctx, throttled, cfg.API, cfg.ID, id)
				} else {
					err = th.Wait(ctx)
				}
				returned.Add(1)
				class := waitErrClass(err)
				msg := ""
				if err != nil {
					msg = err.Error()
				}
				out.add(replica.WaitLine(class, msg))
				if err != nil {
					if ctx.Err() == nil {
						time.Sleep(10 * time.Millisecond) // Redis fails: do not spin
					}
					continue
				}
				if !cfg.RoundTripper {
					// The call goes whatever happens to ctx now: it was admitted.
					if err := replicaGet(context.Background(), plain, cfg.API, cfg.ID, id); err != nil {
						out.add(replica.GetLine(err.Error()))
					}
				}
			}
		}()
	}
	wg.Wait()
	// Let the worker give back what the cancelled calls held.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		th.mu.Lock()
		running := th.running
		th.mu.Unlock()
		if !running {
			break
		}
	}
	out.add(replica.SummaryLine(started.Load(), returned.Load()))
	out.close()
	return 0
}

// replicaGet makes one call to the API and reads and closes the response body.
func replicaGet(ctx context.Context, c *http.Client, url, replicaID, requestID string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set(fakeapi.ReplicaHeader, replicaID)
	req.Header.Set(requestIDHeader, requestID)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// waitErrClass sorts a Wait's error: "" for nil, and the only kinds a Wait may
// return under FailClosed, or "other".
func waitErrClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrRedis):
		return "redis"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "other"
}

// replicaOut writes a replica's lines from one goroutine, each with a single
// os.Stdout.Write, so that a SIGKILL loses only lines not yet written. add
// may be called under the Throttler's mutex: it only queues.
type replicaOut struct {
	mu      sync.Mutex // guards pending
	pending [][]byte
	kick    chan struct{}
	done    chan struct{}
	write   sync.Mutex // held while writing
}

func newReplicaOut() *replicaOut {
	o := &replicaOut{kick: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		for {
			select {
			case <-o.kick:
				o.flush()
			case <-o.done:
				o.flush()
				return
			}
		}
	}()
	return o
}

func (o *replicaOut) add(line []byte) {
	o.mu.Lock()
	o.pending = append(o.pending, line)
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

func (o *replicaOut) flush() {
	o.write.Lock()
	defer o.write.Unlock()
	o.drainLocked()
}

func (o *replicaOut) drainLocked() {
	o.mu.Lock()
	p := o.pending
	o.pending = nil
	o.mu.Unlock()
	for _, line := range p {
		_, _ = os.Stdout.Write(line)
	}
}

// last writes everything queued and then line, and keeps the writer from
// writing anything after it (the process is about to die).
func (o *replicaOut) last(line []byte) {
	o.write.Lock()
	o.drainLocked()
	_, _ = os.Stdout.Write(line)
}

func (o *replicaOut) close() {
	close(o.done)
	o.flush()
}

// ---------------------------------------------------------------------------
// The parent's side: the fake API, and a fleet of replica processes.

// apiRecorder is the fake API behind a recorder that sees every request, the
// refused ones too, with its replica and request id.
type apiRecorder struct {
	api      *fakeapi.API
	interval time.Duration

	mu        sync.Mutex
	arrivals  []time.Time
	byReplica map[string]int // requests received, 429s included
	replicaAt map[string][]time.Time
	ids       map[string]bool
	dups      []string
	noID      int
}

func newAPIRecorder(t *testing.T, limit int, interval time.Duration) (*apiRecorder, string) {
	a := &apiRecorder{
		api: fakeapi.New(limit, interval), interval: interval,
		byReplica: map[string]int{}, replicaAt: map[string][]time.Time{}, ids: map[string]bool{},
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return a, srv.URL
}

func (a *apiRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	id, rep := r.Header.Get(requestIDHeader), r.Header.Get(fakeapi.ReplicaHeader)
	a.mu.Lock()
	a.arrivals = append(a.arrivals, now)
	a.byReplica[rep]++
	a.replicaAt[rep] = append(a.replicaAt[rep], now)
	switch {
	case id == "":
		a.noID++
	case a.ids[id]:
		a.dups = append(a.dups, id)
	default:
		a.ids[id] = true
	}
	a.mu.Unlock()
	a.api.ServeHTTP(w, r)
}

// check fails t if a request came twice or without an id, if any window of
// interval held more than limit arrivals (refused ones included), or if the
// API refused any. It returns the worst window.
func (a *apiRecorder) check(t *testing.T, limit int) int {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.dups) > 0 {
		t.Errorf("the API received %d requests twice, e.g. %q", len(a.dups), a.dups[0])
	}
	if a.noID > 0 {
		t.Errorf("the API received %d requests without an id", a.noID)
	}
	worst := fakeapi.MaxInWindow(a.arrivals, a.interval)
	if worst > limit {
		t.Errorf("at the API a window of %s held %d arrivals, limit %d (%d arrivals)", a.interval, worst, limit, len(a.arrivals))
	}
	if st := a.api.Stats(); st.Rejected > 0 {
		t.Errorf("the API refused %d of %d requests (429)", st.Rejected, st.Rejected+st.Accepted)
	}
	return worst
}

func (a *apiRecorder) received(replicaID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byReplica[replicaID]
}

// countBetween returns, per replica, the requests received within [from, to).
func (a *apiRecorder) countBetween(ids []string, from, to time.Time) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := make([]int, len(ids))
	for i, id := range ids {
		for _, at := range a.replicaAt[id] {
			if !at.Before(from) && at.Before(to) {
				n[i]++
			}
		}
	}
	return n
}

// replicaProc is one replica process and what it reported.
type replicaProc struct {
	*replica.Proc
	cfg       replica.Config
	startedAt time.Time

	// Guarded by the fleet's mu.
	prefix     string
	admitted   int // members
	released   int // members
	waitsOK    int
	waitErrs   map[string]int
	otherErrs  []string
	getErrs    []string
	firstAdmit time.Time // when the parent read its first admission
	killMid    bool
	killMidAt  time.Time
	rejected   int64
	summary    *replica.Event
	killedAt   time.Time // the parent killed it, or saw it kill itself
}

// fleetAdmit is one admitted member, as reported.
type fleetAdmit struct {
	score int64
	p     *replicaProc
	seen  time.Time // when the parent read the line
}

// fleet runs replica processes on one key of one Redis server.
type fleet struct {
	t    *testing.T
	exe  string
	base replica.Config
	api  *apiRecorder
	w    time.Duration

	mu     sync.Mutex
	seq    int
	procs  []*replicaProc
	admits map[string]fleetAdmit // admitted members not given back
	total  int                   // admitted members ever reported
}

func newFleet(t *testing.T, srv *redistest.Server, base replica.Config) *fleet {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	api, url := newAPIRecorder(t, base.Limit, base.Interval)
	base.Addr, base.Key, base.API = srv.Addr(), srv.Key(t, "quota"), url
	f := &fleet{t: t, exe: exe, base: base, api: api, w: base.Interval + base.Buffer, admits: map[string]fleetAdmit{}}
	// Runs before the API and Redis are stopped (cleanups run last first).
	t.Cleanup(func() {
		for _, p := range f.all() {
			p.Kill()
		}
	})
	return f
}

func (f *fleet) all() []*replicaProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.procs)
}

// start launches a replica; mod adjusts its configuration.
func (f *fleet) start(mod func(*replica.Config)) *replicaProc {
	f.t.Helper()
	f.mu.Lock()
	f.seq++
	cfg := f.base
	cfg.ID = fmt.Sprintf("r%d", f.seq)
	f.mu.Unlock()
	if mod != nil {
		mod(&cfg)
	}
	p := &replicaProc{cfg: cfg, startedAt: time.Now(), waitErrs: map[string]int{}}
	rp, err := replica.Start(f.exe, cfg, func(_ *replica.Proc, e replica.Event) { f.onEvent(p, e) })
	if err != nil {
		f.t.Fatalf("starting replica %s: %v", cfg.ID, err)
	}
	f.mu.Lock()
	p.Proc = rp
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

func (f *fleet) onEvent(p *replicaProc, e replica.Event) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch e.Kind {
	case replica.KindStart:
		p.prefix = e.Prefix
	case replica.KindAdmit:
		for _, m := range e.Members {
			f.admits[m] = fleetAdmit{score: e.Score, p: p, seen: now}
		}
		p.admitted += len(e.Members)
		f.total += len(e.Members)
		if p.firstAdmit.IsZero() {
			p.firstAdmit = now
		}
	case replica.KindRelease:
		for _, m := range e.Members {
			if _, ok := f.admits[m]; !ok {
				p.otherErrs = append(p.otherErrs, fmt.Sprintf("released member %x that was not admitted", m))
			}
			delete(f.admits, m)
		}
		p.released += len(e.Members)
	case replica.KindWait:
		switch {
		case e.OK:
			p.waitsOK++
		case e.Class == "redis" || e.Class == "canceled" || e.Class == "deadline":
			p.waitErrs[e.Class]++
		default:
			p.otherErrs = append(p.otherErrs, "Wait returned an unexpected error: "+e.Message)
		}
	case replica.KindGet:
		p.getErrs = append(p.getErrs, e.Message)
	case replica.KindKillMid:
		p.killMid, p.killMidAt, p.rejected = true, now, e.N
	case replica.KindSummary:
		p.summary = &e
	}
}

// admitted returns the number of admitted members reported so far.
func (f *fleet) admitted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

// waitAdmitted waits until n members were admitted in all.
func (f *fleet) waitAdmitted(n int, within time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for f.admitted() < n {
		if time.Now().After(deadline) {
			f.t.Fatalf("only %d admissions within %s, want %d", f.admitted(), within, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill SIGKILLs p and notes when.
func (f *fleet) kill(p *replicaProc) time.Time {
	p.Kill()
	now := time.Now()
	f.mu.Lock()
	p.killedAt = now
	f.mu.Unlock()
	return now
}

// scores returns the scores of the admitted members not given back, sorted.
func (f *fleet) scores(keep func(fleetAdmit) bool) []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s []int64
	for _, a := range f.admits {
		if keep == nil || keep(a) {
			s = append(s, a.score)
		}
	}
	slices.Sort(s)
	return s
}

// stopAll stops every replica still running, gracefully, in parallel.
func (f *fleet) stopAll() {
	f.t.Helper()
	var wg sync.WaitGroup
	for _, p := range f.all() {
		select {
		case <-p.Done():
			continue
		default:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Stop(15 * time.Second); err != nil {
				f.t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// fleetOutcome is what verify measured.
type fleetOutcome struct {
	admitted    int // members admitted and not given back
	released    int
	worstScores int // most admission scores in a window of interval+buffer
	worstAPI    int // most arrivals in a window of interval
	waitsOK     int
	waitErrs    map[string]int
}

func (o fleetOutcome) String() string {
	classes := make([]string, 0, len(o.waitErrs))
	for c, n := range o.waitErrs {
		classes = append(classes, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(classes)
	return fmt.Sprintf("worst window %d (scores) / %d (API) vs limit; %d admitted (%d given back), Waits ok=%d err{%s}",
		o.worstScores, o.worstAPI, o.admitted, o.released, o.waitsOK, strings.Join(classes, ","))
}

// verify checks, once every replica has exited, that the limit held over the
// reported scores and at the API, that every replica ran clean, and that no
// call was lost or duplicated: for a replica that exited gracefully, every
// Wait returned, and the Waits that returned nil are exactly its admissions
// not given back and exactly the requests the API got from it.
func (f *fleet) verify() fleetOutcome {
	t := f.t
	t.Helper()
	limit := f.base.Limit
	o := fleetOutcome{waitErrs: map[string]int{}}
	o.worstAPI = f.api.check(t, limit)
	scores := f.scores(nil)
	o.admitted = len(scores)
	o.worstScores = maxInWindow(scores, f.w.Microseconds())
	if o.worstScores > limit {
		t.Errorf("over the reported admission scores a window of %s held %d, limit %d (%d admissions)", f.w, o.worstScores, limit, len(scores))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.procs {
		<-p.Done()
		o.waitsOK += p.waitsOK
		o.released += p.released
		for c, n := range p.waitErrs {
			o.waitErrs[c] += n
		}
		stderr := p.Stderr()
		switch {
		case strings.Contains(stderr, "DATA RACE"):
			t.Errorf("replica %s: data race:\n%s", p.cfg.ID, stderr)
		case strings.Contains(stderr, "panic:") || strings.Contains(stderr, "fatal error:"):
			t.Errorf("replica %s crashed:\n%s", p.cfg.ID, stderr)
		}
		if err := p.LineErr(); err != nil {
			t.Errorf("replica %s: %v", p.cfg.ID, err)
		}
		for _, e := range p.otherErrs {
			t.Errorf("replica %s: %s", p.cfg.ID, e)
		}
		for _, e := range p.getErrs {
			t.Errorf("replica %s: an admitted call failed: %s", p.cfg.ID, e)
		}
		if !p.killedAt.IsZero() {
			continue // killed: its last lines may be lost
		}
		if code := p.ExitCode(); code != 0 {
			t.Errorf("replica %s exited with code %d:\n%s", p.cfg.ID, code, stderr)
			continue
		}
		if p.summary == nil {
			t.Errorf("replica %s exited without its summary line", p.cfg.ID)
			continue
		}
		if p.summary.N != p.summary.M {
			t.Errorf("replica %s: %d Waits started, %d returned", p.cfg.ID, p.summary.N, p.summary.M)
		}
		errs := 0
		for _, n := range p.waitErrs {
			errs += n
		}
		if int64(p.waitsOK+errs) != p.summary.M {
			t.Errorf("replica %s: %d Waits returned, %d reported (%d ok, %d errors)", p.cfg.ID, p.summary.M, p.waitsOK+errs, p.waitsOK, errs)
		}
		if p.waitsOK != p.admitted-p.released {
			t.Errorf("replica %s: %d Waits returned nil, but %d admissions were reported and %d given back", p.cfg.ID, p.waitsOK, p.admitted, p.released)
		}
		if got := f.api.received(p.cfg.ID); got != p.waitsOK {
			t.Errorf("replica %s: %d Waits returned nil, the API received %d requests from it", p.cfg.ID, p.waitsOK, got)
		}
	}
	return o
}

// firstFullWindow returns the index of the first of limit consecutive sorted scores
// spanning less than w (limit calls in one window), or -1.
func firstFullWindow(sorted []int64, limit int, w int64) int {
	for i := 0; i+limit-1 < len(sorted); i++ {
		if sorted[i+limit-1]-sorted[i] < w {
			return i
		}
	}
	return -1
}

func medianDuration(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[len(d)/2].Round(time.Millisecond)
}

func fmtMicros(micros int64) string {
	return (time.Duration(micros) * time.Microsecond).Round(time.Millisecond).String()
}

// ---------------------------------------------------------------------------
// The faults.

// TestFaultReplicasKilled: three replica processes keep the key saturated
// while replicas are SIGKILLed at random moments, some by themselves right
// after a reply rejected claims whose members are still in Redis, each
// replaced at once. The limit holds throughout; what the dead leave behind
// stops counting within the crash bound (interval + buffer + reserve-ahead)
// and is deleted a second later; and the survivors get the full capacity
// back within the crash bound after the last kill.
func TestFaultReplicasKilled(t *testing.T) {
	const (
		limit      = 20
		interval   = 500 * time.Millisecond
		buffer     = 50 * time.Millisecond
		goroutines = 6
		wantKills  = 22
		wantMid    = 6 // of them, self-kills mid-reservation
	)
	ahead := min(interval, time.Second) // the default reserve-ahead
	bound := interval + buffer + ahead  // the documented crash bound
	w := interval + buffer
	srv := redistest.Start(t)
	f := newFleet(t, srv, replica.Config{Limit: limit, Interval: interval, Buffer: buffer, Goroutines: goroutines})
	client := srv.NewClient()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kill schedule seed %d", seed)
		}
	})

	var slots [3]*replicaProc
	for i := range slots {
		slots[i] = f.start(nil)
	}
	f.waitAdmitted(2*limit, 20*time.Second)

	midAlive := func(except int) bool {
		for i, p := range slots {
			if i != except && p.cfg.KillMid > 0 {
				return true
			}
		}
		return false
	}
	kills, mids := 0, 0
	var lastKill time.Time
	killed := map[string]time.Time{} // member prefix -> when its replica died
	replace := func(i int, at time.Time) {
		f.mu.Lock()
		killed[slots[i].prefix] = at
		f.mu.Unlock()
		kills++
		lastKill = at
		var mod func(*replica.Config)
		// At most one mid-reservation replica at a time, so that two
		// ordinary ones keep the key saturated.
		if mids < wantMid && !midAlive(i) {
			n := 1 + rng.IntN(3)
			mod = func(c *replica.Config) { c.KillMid = n }
		}
		slots[i] = f.start(mod)
	}
	// Hard bound on the kill phase: the random kills take about 6s; the
	// self-kills need a replica to see rejected claims a few times.
	phaseEnd := time.Now().Add(30 * time.Second)
	nextKill := time.Now().Add(time.Duration(100+rng.IntN(300)) * time.Millisecond)
	for kills < wantKills-1 || mids < wantMid {
		if time.Now().After(phaseEnd) {
			t.Fatalf("kill phase over time: %d kills, %d of them mid-reservation (want %d, %d)", kills, mids, wantKills, wantMid)
		}
		time.Sleep(5 * time.Millisecond)
		for i, p := range slots {
			select {
			case <-p.Done():
			default:
				continue
			}
			f.mu.Lock()
			mid, at := p.killMid, p.killMidAt
			f.mu.Unlock()
			if !mid {
				t.Fatalf("replica %s died on its own (exit code %d):\n%s", p.cfg.ID, p.ExitCode(), p.Stderr())
			}
			f.mu.Lock()
			p.killedAt = at
			f.mu.Unlock()
			mids++
			replace(i, at)
		}
		if kills < wantKills-1 && time.Now().After(nextKill) {
			// A random replica, but leave a mid-reservation one time to
			// kill itself (2s).
			var cand []int
			for i, p := range slots {
				if p.cfg.KillMid == 0 || time.Since(p.startedAt) > 2*time.Second {
					cand = append(cand, i)
				}
			}
			i := cand[rng.IntN(len(cand))]
			replace(i, f.kill(slots[i]))
			nextKill = time.Now().Add(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		} else if kills >= wantKills-1 {
			// Only self-kills missing: a mid-reservation replica that does
			// not get there in 3s is killed and replaced by another.
			for i, p := range slots {
				if p.cfg.KillMid > 0 && time.Since(p.startedAt) > 3*time.Second {
					replace(i, f.kill(p))
				}
			}
		}
	}
	// The last kill: a replica running for a second or more that holds the
	// most slots reserved ahead right now, so that the survivors' recovery
	// measures the crash bound.
	pick := -1
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		now := serverMicros(t, client)
		ahead := map[string]int{}
		for m, score := range keyMembers(t, client, f.base.Key) {
			if score > now {
				ahead[m[:min(len(m), 10)]]++
			}
		}
		pick = -1
		best := 0
		f.mu.Lock()
		for i, p := range slots {
			if time.Since(p.startedAt) >= time.Second && ahead[p.prefix] > best {
				pick, best = i, ahead[p.prefix]
			}
		}
		f.mu.Unlock()
		if pick >= 0 {
			break
		}
	}
	if pick < 0 {
		t.Fatal("no replica running for 1s held a slot ahead within 3s")
	}
	victim := slots[pick]
	replace(pick, f.kill(victim))
	k := lastKill.UnixMicro()
	f.mu.Lock()
	victimPrefix := victim.prefix
	f.mu.Unlock()
	held, furthest := 0, int64(0)
	for m, score := range keyMembers(t, client, f.base.Key) {
		if strings.HasPrefix(m, victimPrefix) && score > k {
			held++
			furthest = max(furthest, score-k)
		}
	}
	// The live replicas keep the key busy (and trimmed) past the crash
	// bound of the last kill, plus the second before deletion, plus a trim.
	isDead := func(prefix string) (time.Time, bool) {
		f.mu.Lock()
		defer f.mu.Unlock()
		at, ok := killed[prefix]
		return at, ok
	}
	time.Sleep(time.Until(lastKill.Add(bound + 100*time.Millisecond)))
	// (b1) At the crash bound, nothing of a dead replica counts any more.
	now := serverMicros(t, client)
	behind := 0
	for m, score := range keyMembers(t, client, f.base.Key) {
		at, dead := isDead(m[:min(len(m), 10)])
		if !dead {
			continue
		}
		behind++
		if score > now-w.Microseconds() {
			t.Errorf("a member of a replica killed %s before still counts: score %s before now (crash bound %s)",
				time.Since(at).Round(time.Millisecond), fmtMicros(now-score), bound)
		}
	}
	// (b2) A second after they stop counting (and a trim), they are gone.
	const slack = 500 * time.Millisecond
	time.Sleep(time.Until(lastKill.Add(bound + time.Second + minTrimEvery + slack)))
	now = serverMicros(t, client)
	left, oldest := 0, now
	for m, score := range keyMembers(t, client, f.base.Key) {
		oldest = min(oldest, score)
		if _, dead := isDead(m[:min(len(m), 10)]); dead {
			left++
		}
		if score <= now-(w+time.Second+slack).Microseconds() {
			t.Errorf("member %x is %s old, past the window (%s) plus the 1s before deletion plus %s", m, fmtMicros(now-score), w, slack)
		}
	}
	// (c) Capacity back: the survivors' admissions after the last kill.
	after := f.scores(func(a fleetAdmit) bool { return a.p.killedAt.IsZero() && a.score > k })
	recovery := "never"
	if i := firstFullWindow(after, limit, w.Microseconds()); i < 0 {
		t.Errorf("after the last kill the survivors never got %d admissions in a window of %s (%d admissions)", limit, w, len(after))
	} else {
		r := time.Duration(after[i]-k) * time.Microsecond
		recovery = fmt.Sprintf("%s (window full at %s)", r.Round(time.Millisecond), fmtMicros(after[i+limit-1]-k))
		if r > bound+200*time.Millisecond {
			t.Errorf("the first window of %d survivor admissions began %s after the last kill, past the crash bound %s", limit, r, bound)
		}
	}
	f.stopAll()
	o := f.verify()
	rejected := int64(0)
	f.mu.Lock()
	for _, p := range f.procs {
		rejected += p.rejected
	}
	f.mu.Unlock()
	t.Logf("outcome: %d kills (%d mid-reservation, leaving %d rejected claims in Redis), %s; at the crash bound %d dead members left (none counting), %d left after bound+1s+trim (oldest member %s old); the last victim held %d slots up to %s ahead, survivors' first full window began %s after the kill (crash bound %s)",
		kills, mids, rejected, o, behind, left, fmtMicros(now-oldest), held, fmtMicros(furthest), recovery, bound)
}

// TestFaultRedisHangs: redis-server stopped with SIGSTOP for 2s under load
// from three Throttlers (separate clients), once per failure policy. Waits
// return within the Redis timeout as the policy says, FallbackLocal keeps
// the total within the limit during the hang, and throughput is back soon
// after SIGCONT.
func TestFaultRedisHangs(t *testing.T) {
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
		th.onAdmit = func(score int64, members []string) {
			mu.Lock()
			for _, m := range members {
				byMem[m] = score
			}
			mu.Unlock()
		}
		th.onRelease = func(members []string) {
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
	// hang is answered within the Redis timeout, or, with a deadline, within
	// what WaitN documents for a ctx that ends first: the deadline plus the
	// give-back of its reservation (min(250ms, Redis timeout)); whichever
	// comes first, plus slack. A Throttler's first failure may also have to
	// wait out its worker's nap (at most maxQuiet): a waiter joining a
	// non-empty queue does not wake it.
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
			bound = min(bound, r.deadline+min(250*time.Millisecond, timeout))
		}
		if r.start.Before(pauseAt.Add(maxQuiet + timeout)) {
			bound += maxQuiet
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
		if worst := maxInWindow(scores, w.Microseconds()); worst > limit {
			t.Errorf("over the admission scores a window of %s held %d, limit %d", w, worst, limit)
		}
		detail = fmt.Sprintf("worst window %d (scores); Waits with a %s deadline returned after %s (median) to %s (max); %d ErrRedis of Waits without a deadline also match context.DeadlineExceeded; %d members of timed-out round trips written by Redis after SIGCONT",
			maxInWindow(scores, w.Microseconds()), short, medianDuration(shortDone), slices.Max(append(shortDone, 0)), deadlineRedis, zombies)
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

// TestFaultRedisRestartHeals: three replica processes, calling the API through
// the Throttler's RoundTripper, keep the key saturated while redis-server is
// killed and restarted empty three times. The replicas heal the lost window:
// no window over the limit at the API or over the scores.
func TestFaultRedisRestartHeals(t *testing.T) {
	const (
		limit      = 20
		interval   = 500 * time.Millisecond
		buffer     = 50 * time.Millisecond
		goroutines = 6
	)
	srv := redistest.Start(t)
	f := newFleet(t, srv, replica.Config{Limit: limit, Interval: interval, Buffer: buffer, Goroutines: goroutines, RoundTripper: true})
	for range 3 {
		f.start(nil)
	}
	f.waitAdmitted(2*limit, 20*time.Second)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("restart schedule seed %d", seed)
		}
	})
	var pauses []string
	for range 3 {
		time.Sleep(time.Duration(1000+rng.IntN(400)) * time.Millisecond)
		killAt := time.Now()
		srv.Restart(t)
		upAt := time.Now()
		// The pause: from the kill to the first admission decided by the
		// new server.
		var first time.Time
		for deadline := upAt.Add(5 * time.Second); first.IsZero() && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			f.mu.Lock()
			for _, a := range f.admits {
				if a.seen.After(upAt) && (first.IsZero() || a.seen.Before(first)) {
					first = a.seen
				}
			}
			f.mu.Unlock()
		}
		if first.IsZero() {
			t.Fatalf("no admission within 5s of a restart")
		}
		pauses = append(pauses, fmt.Sprintf("%s (restart %s)", first.Sub(killAt).Round(time.Millisecond), upAt.Sub(killAt).Round(time.Millisecond)))
	}
	time.Sleep(1500 * time.Millisecond)
	f.stopAll()
	o := f.verify()
	t.Logf("outcome: 3 restarts; %s; admissions paused after each restart for %s", o, strings.Join(pauses, ", "))
}

// TestFaultClockSkew: three replica processes whose local clocks are 5s
// behind, 5s ahead and right keep the key saturated: the limit holds, and
// they share it fairly.
func TestFaultClockSkew(t *testing.T) {
	const (
		limit      = 20
		interval   = 500 * time.Millisecond
		buffer     = 50 * time.Millisecond
		goroutines = 6
		run        = 3 * time.Second
	)
	srv := redistest.Start(t)
	f := newFleet(t, srv, replica.Config{Limit: limit, Interval: interval, Buffer: buffer, Goroutines: goroutines})
	var ids []string
	for _, skew := range []time.Duration{-5 * time.Second, 5 * time.Second, 0} {
		p := f.start(func(c *replica.Config) { c.Skew = skew })
		ids = append(ids, p.cfg.ID)
	}
	// Fairness is measured once all three are running.
	var from time.Time
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		all := true
		for _, p := range f.procs {
			all = all && !p.firstAdmit.IsZero()
		}
		f.mu.Unlock()
		if all {
			from = time.Now().Add(200 * time.Millisecond)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not every replica was admitted within 20s")
		}
	}
	time.Sleep(time.Until(from.Add(run)))
	to := time.Now()
	f.stopAll()
	o := f.verify()
	counts := f.api.countBetween(ids, from, to)
	sum, sq := 0.0, 0.0
	for _, n := range counts {
		sum += float64(n)
		sq += float64(n) * float64(n)
	}
	jain := 0.0
	if sq > 0 {
		jain = sum * sum / (float64(len(counts)) * sq)
	}
	if jain < 0.9 || math.IsNaN(jain) {
		t.Errorf("Jain fairness index %.3f of the calls per replica %v (skews -5s, +5s, 0), want >= 0.9", jain, counts)
	}
	t.Logf("outcome: skews -5s/+5s/0: %s; calls per replica in %s: %v, Jain index %.3f", o, run, counts, jain)
}
