package harness

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-throttler/throttler/internal/netfault"
)

// Fault is what a KindRedisFault scenario does to its replicas' Redis
// links: each replica reaches redis-server through a netfault.Proxy of
// its own, which the harness process runs and breaks as set here, from
// the replicas' go on.
type Fault struct {
	// Replica is the replica whose link is broken; -1: every replica's.
	Replica int
	// Lasting settings: the one-way delays (SetDelay), their jitters
	// (SetJitter) and a slow link (SetRate, bytes a second each way).
	Up, Down             time.Duration
	JitterUp, JitterDown time.Duration
	Rate                 int
	// A recurring fault, First after go and every Every after: a Reset
	// of that length (connections reset, and new ones for as long), a Cut
	// (for as long, a reply resets its connection: the request was
	// applied, its answer lost: netfault's CutReplies), or a Stall (no
	// byte forwarded, none lost).
	Reset, Cut, Stall time.Duration
	First, Every      time.Duration
}

func (f *Fault) String() string {
	if f == nil {
		return "no fault"
	}
	var parts []string
	if f.Up > 0 || f.Down > 0 {
		parts = append(parts, fmt.Sprintf("delay %s up, %s down", f.Up, f.Down))
	}
	if f.JitterUp > 0 || f.JitterDown > 0 {
		parts = append(parts, fmt.Sprintf("jitter 0-%s up, 0-%s down", f.JitterUp, f.JitterDown))
	}
	if f.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%d KB/s each way", f.Rate>>10))
	}
	if f.Reset > 0 {
		parts = append(parts, fmt.Sprintf("resets for %s every %s from %s", f.Reset, f.Every, f.First))
	}
	if f.Cut > 0 {
		parts = append(parts, fmt.Sprintf("replies lost (their connections reset) for %s every %s from %s", f.Cut, f.Every, f.First))
	}
	if f.Stall > 0 {
		parts = append(parts, fmt.Sprintf("stalls of %s every %s from %s", f.Stall, f.Every, f.First))
	}
	who := "every replica's link"
	if f.Replica >= 0 {
		who = fmt.Sprintf("replica %d's link only", f.Replica)
	}
	return strings.Join(parts, ", ") + " (" + who + ")"
}

// hits reports whether the fault breaks replica i's link.
func (f *Fault) hits(i int) bool { return f.Replica < 0 || f.Replica == i }

// faultRun is one KindRedisFault run's proxies, one per replica.
type faultRun struct {
	fault   *Fault
	proxies []*netfault.Proxy
	stop    chan struct{}
	wg      sync.WaitGroup
}

// startFaults starts a proxy to redisAddr for each of procs replicas.
func startFaults(f *Fault, redisAddr string, procs int) (*faultRun, error) {
	r := &faultRun{fault: f, stop: make(chan struct{})}
	for range procs {
		p, err := netfault.Listen(redisAddr)
		if err != nil {
			r.close()
			return nil, err
		}
		r.proxies = append(r.proxies, p)
	}
	return r, nil
}

// configure points replica cfg's Redis client at its proxy.
func (r *faultRun) configure(cfg *ReplicaConfig) {
	if r != nil {
		cfg.RedisAddr = r.proxies[cfg.Index].Addr()
	}
}

// run breaks the links from now (the replicas' go) until close: the
// lasting settings at once, then the recurring fault on its schedule.
func (r *faultRun) run() {
	if r == nil {
		return
	}
	f := r.fault
	var hit []*netfault.Proxy
	for i, p := range r.proxies {
		if f.hits(i) {
			hit = append(hit, p)
		}
	}
	for _, p := range hit {
		p.SetDelay(f.Up, f.Down)
		p.SetJitter(f.JitterUp, f.JitterDown)
		p.SetRate(f.Rate)
	}
	if (f.Reset <= 0 && f.Cut <= 0 && f.Stall <= 0) || f.Every <= 0 {
		return
	}
	r.wg.Go(func() {
		next := time.Now().Add(f.First)
		t := time.NewTimer(f.First)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-r.stop:
				return
			}
			for _, p := range hit {
				if f.Reset > 0 {
					p.Reset(f.Reset)
				}
				if f.Cut > 0 {
					p.CutReplies(f.Cut)
				}
				if f.Stall > 0 {
					p.Stall(f.Stall)
				}
			}
			next = next.Add(f.Every)
			t.Reset(time.Until(next))
		}
	})
}

// close stops the schedule and the proxies, and returns their counts.
func (r *faultRun) close() []netfault.Counts {
	if r == nil {
		return nil
	}
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.wg.Wait()
	var counts []netfault.Counts
	for _, p := range r.proxies {
		counts = append(counts, p.Counts())
		p.Close()
	}
	return counts
}

// FaultRow is what a KindRedisFault run measures besides a Row's figures.
type FaultRow struct {
	Fault string `json:"fault"` // what was done, to which link
	// Replica is the replica whose link was broken; -1: every replica's.
	Replica int `json:"replica"`
	// WaitErrors is every Wait that failed, whole run, all replicas
	// (Row.Errors); of those, Deadline failed by the call's own deadline
	// (context.DeadlineExceeded: its slot lay past it, or it passed),
	// RedisTimeout by a Redis client's timeout (a read or pool timeout),
	// and Other by anything else (a connection reset, EOF, ...).
	WaitErrors   int64 `json:"wait_errors"`
	Deadline     int64 `json:"deadline"`
	RedisTimeout int64 `json:"redis_timeout"`
	Other        int64 `json:"other"`
	// Messages are the distinct error messages, addresses left out, most
	// first, with their kind and count.
	Messages []ErrorCount `json:"messages,omitempty"`
	// Shares are each replica's share of the calls that reached the API
	// after the warm-up (Row.PerProc); EqualShare is 1/procs.
	Shares     []float64 `json:"shares"`
	EqualShare float64   `json:"equal_share"`
	// Proxies are each replica's proxy's connection counts.
	Proxies []netfault.Counts `json:"proxies"`
}

// ErrorCount is one distinct error message and how often it came.
type ErrorCount struct {
	Message string `json:"message"`
	Kind    string `json:"kind"` // deadline, redis timeout, other
	N       int64  `json:"n"`
}

// faultFigures sums up the replicas' Wait errors and the shares of a
// KindRedisFault run.
func faultFigures(sc Scenario, row Row, results []ReplicaResult, proxies []netfault.Counts) *FaultRow {
	f := &FaultRow{Fault: sc.Fault.String(), Replica: sc.Fault.Replica, WaitErrors: row.Errors, Proxies: proxies,
		EqualShare: 1 / float64(max(sc.Procs, 1))}
	msgs := map[[2]string]int64{}
	for _, r := range results {
		f.Deadline += r.DeadlineErrors
		f.RedisTimeout += r.TimeoutErrors
		for _, m := range r.ErrorMessages {
			msgs[[2]string{m.Message, m.Kind}] += m.N
		}
	}
	f.Other = f.WaitErrors - f.Deadline - f.RedisTimeout
	for k, n := range msgs {
		f.Messages = append(f.Messages, ErrorCount{Message: k[0], Kind: k[1], N: n})
	}
	slices.SortFunc(f.Messages, func(a, b ErrorCount) int {
		return cmp.Or(cmp.Compare(b.N, a.N), cmp.Compare(a.Message, b.Message))
	})
	var sum int64
	for _, n := range row.PerProc {
		sum += n
	}
	for _, n := range row.PerProc {
		share := 0.0
		if sum > 0 {
			share = float64(n) / float64(sum)
		}
		f.Shares = append(f.Shares, share)
	}
	return f
}

// writeFaults writes the table of KindRedisFault rows, and their error
// messages.
func writeFaults(b *strings.Builder, rows []Row, multi bool) {
	b.WriteString(runCols("| redis faults | impl | admitted/s | utilization | max in window | strict rejects | Wait errors | deadline | Redis timeout | other | calls per replica (share) | broken replica's share / equal | Jain | proxy resets | RT/adm | wait p50 | wait p99 |\n",
		"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n", 1, multi))
	for _, row := range rows {
		f := row.Fault
		var per []string
		for i, n := range row.PerProc {
			share := 0.0
			if i < len(f.Shares) {
				share = f.Shares[i]
			}
			per = append(per, fmt.Sprintf("%d (%.1f%%)", n, 100*share))
		}
		target := "—"
		if f.Replica >= 0 && f.Replica < len(f.Shares) {
			target = fmt.Sprintf("%.1f%% / %.1f%%", 100*f.Shares[f.Replica], 100*f.EqualShare)
		}
		var resets int64
		for _, p := range f.Proxies {
			resets += p.Reset
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %d | %d | %d | %d | %s | %s | %s | %d | %.2f | %s | %s |\n",
			row.Scenario, row.impl(multi), fmtRate(row.AdmittedPerSec),
			optF(row.Utilization, func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }),
			optI(row.MaxInWindow, row.Limit), optI(row.StrictRejects, 0),
			f.WaitErrors, f.Deadline, f.RedisTimeout, f.Other, strings.Join(per, ", "), target,
			optF(row.Jain, func(v float64) string { return fmt.Sprintf("%.3f", v) }), resets,
			row.RoundTripsPerAdm, fmtMs(row.WaitP50Ms), fmtMs(row.WaitP99Ms))
	}
	b.WriteString("\n")
	var lines []string
	for _, row := range rows {
		for i, m := range row.Fault.Messages {
			if i == 5 {
				lines = append(lines, fmt.Sprintf("- %s/%s: %d more messages", row.Scenario, runLabel(row.Impl, row.Run, multi), len(row.Fault.Messages)-i))
				break
			}
			lines = append(lines, fmt.Sprintf("- %s/%s: %d × (%s) %s", row.Scenario, runLabel(row.Impl, row.Run, multi), m.N, m.Kind, m.Message))
		}
	}
	if len(lines) > 0 {
		b.WriteString("Wait errors by message (addresses left out), most first:\n\n" + strings.Join(lines, "\n") + "\n\n")
	}
}
