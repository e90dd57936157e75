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
//
// This file holds the parent's side: a fleet of replica processes. The
// replica program is in replica_main_test.go, the fake API in
// apirecorder_test.go, and the faults in the fault_*_test.go files.

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/go-throttler/throttler/internal/fakeapi"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/go-throttler/throttler/internal/replica"
)

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

// newFleet makes a fleet of replicas running base on a fresh key of srv,
// calling an API made with apiOpts. With base.InFlight, the rate's key and
// the places' share a hash tag.
func newFleet(t *testing.T, srv *redistest.Server, base replica.Config, apiOpts ...fakeapi.Option) *fleet {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("os.Executable: %v", err)
	}
	api, url := newAPIRecorder(t, base.Limit, base.Interval, apiOpts...)
	base.Addr, base.Key, base.API = srv.Addr(), srv.Key(t, "quota"), url
	if base.InFlight > 0 {
		tag := "{" + base.Key + "}"
		base.Key, base.InFlightKey = tag+":rate", tag+":inflight"
	}
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
	o.worstScores = core.MaxInWindow(scores, f.w.Microseconds())
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

func fmtMicros(micros int64) string {
	return (time.Duration(micros) * time.Microsecond).Round(time.Millisecond).String()
}
