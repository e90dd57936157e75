package harness

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-throttler/throttler/bench/internal/fakeapi"
	"github.com/go-throttler/throttler/bench/internal/metrics"
	"github.com/go-throttler/throttler/internal/netfault"
	"github.com/redis/go-redis/v9"
)

// This file is the harness's side of the far scenarios (KindFar): the API
// over HTTPS behind a proxy that puts it OneWay away, the watch on the
// key's admissions in Redis, and the figures.

// farRun is one KindFar run's API, the proxy in front of it, and the
// watch on the key's admissions.
type farRun struct {
	sc    Scenario
	ca    *testCA
	api   *fakeapi.Server
	proxy *netfault.Proxy
	url   string
	watch *admissionWatch
}

// startFar starts a KindFar run's API: a TLS server for 127.0.0.1 (a
// certificate of a fresh CA; HTTP/2 offered when sc.HTTP2), which
// enforces sc's strict window and closes connections idle for
// sc.IdleTimeout, behind a proxy that delays every chunk sc.OneWay each
// way and a new connection's first bytes a round trip more (its TCP
// handshake).
func startFar(sc Scenario) (*farRun, error) {
	ca, err := newTestCA()
	if err != nil {
		return nil, err
	}
	api, err := fakeapi.StartConfig(fakeapi.Config{
		TLS: &tls.Config{Certificates: []tls.Certificate{ca.Server}}, HTTP2: sc.HTTP2,
		IdleTimeout: sc.IdleTimeout, Limit: sc.Limit, Window: sc.Interval,
	})
	if err != nil {
		return nil, err
	}
	proxy, err := netfault.Listen(api.Addr())
	if err != nil {
		api.Close()
		return nil, err
	}
	proxy.SetDelay(sc.OneWay, sc.OneWay)
	proxy.SetHandshake(2 * sc.OneWay)
	return &farRun{sc: sc, ca: ca, api: api, proxy: proxy, url: "https://" + proxy.Addr() + "/call"}, nil
}

// close stops the watch (if still on), the proxy and the API.
func (f *farRun) close() {
	if f == nil {
		return
	}
	if f.watch != nil {
		f.watch.end()
	}
	f.proxy.Close()
	f.api.Close()
}

// joinAt is when the joining processes start, after go: sc.JoinAt, or
// half the run when that is shorter (a -duration that cuts the run).
func joinAt(sc Scenario) time.Duration {
	if sc.Joiners <= 0 {
		return 0
	}
	return min(sc.JoinAt, sc.Duration/2)
}

// startsAt is when replica i starts, after go.
func startsAt(sc Scenario, i int) time.Duration {
	if i >= sc.Procs-sc.Joiners {
		return joinAt(sc)
	}
	return 0
}

// configure points replica cfg at the API through the proxy, with its CA,
// and shortens a joining replica's run so that it ends with the others'.
func (f *farRun) configure(cfg *ReplicaConfig) {
	if f == nil {
		return
	}
	cfg.APIURL, cfg.CAPEM = f.url, f.ca.PEM
	if d := startsAt(f.sc, cfg.Index); d > 0 {
		cfg.Duration -= d
		cfg.Warmup = max(0, cfg.Warmup-d)
	}
}

// start watches the key's admissions from t0 (go) on.
func (f *farRun) start(rdb *redis.Client, key string, t0 time.Time) {
	if f != nil {
		f.watch = watchAdmissions(rdb, key, f.sc.Interval, t0.Add(-time.Second), 100*time.Millisecond)
	}
}

// take returns what the API saw, each arrival given what its replica
// recorded of it (when its wait began and returned, when its Transport
// began to get a connection: Started, Returned and Sent) and the score of
// its admission read from Redis (Score), and the admissions with the
// prefix matched to each replica.
func (f *farRun) take(results []ReplicaResult, buffer time.Duration) ([]fakeapi.Arrival, []fakeapi.Stall, []Admission, map[int]string, error) {
	adm, err := f.watch.end()
	f.watch = nil
	traces := map[string]CallTrace{}
	calls := map[int][]handoff{}
	for _, r := range results {
		for _, c := range r.Calls {
			traces[c.Call] = c
			calls[r.Index] = append(calls[r.Index], handoff{call: c.Call, waited: c.Waited, wrote: c.WroteHeaders})
		}
	}
	scores, prefixes := matchScores(calls, adm, buffer+25*time.Millisecond, 10*time.Millisecond)
	arrivals := f.api.Take()
	for i := range arrivals {
		a := &arrivals[i]
		c, ok := traces[a.Call]
		if !ok {
			continue
		}
		a.Started, a.Returned, a.Sent = nsTime(c.Started), nsTime(c.Waited), nsTime(cmp0(c.GetConn, c.Waited))
		if s, ok := scores[a.Call]; ok {
			a.Score = time.UnixMicro(s)
		}
	}
	return arrivals, f.api.Stalls(), adm, prefixes, err
}

// nsTime is Unix ns as a Time; 0 is the zero Time.
func nsTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// cmp0 is a, or b when a is 0.
func cmp0(a, b int64) int64 {
	if a == 0 {
		return b
	}
	return a
}

// FarRow is what a KindFar run measures besides a Row's figures. A Row's
// MaxInWindow and StrictRejects count every request that reached the API
// (refused ones too: what it saw); its Utilization and AdmittedPerSec are
// UtilAfter's. What the library itself counted of its sends (how late
// requests were written after their slots, sends that took a new slot at
// their connection) is in Row.Stats, whole, as each replica's Stats held
// it: see libstats.go.
type FarRow struct {
	OneWayMs float64 `json:"one_way_ms"`
	HTTP2    bool    `json:"http2_offered"`
	JoinAtMs float64 `json:"join_at_ms"`
	// Protos counts the requests the API saw by protocol.
	Protos map[string]int `json:"protos"`
	// Accepted and Refused are the requests the API answered 200 and 429
	// (refused: they would have put more than the limit in a window;
	// they count in no window), whole run; RefusedPerInterval the 429s by
	// interval after go.
	Accepted           int   `json:"accepted"`
	Refused            int   `json:"refused"`
	RefusedPerInterval []int `json:"refused_per_interval"`
	// UtilRun is the requests accepted at the API that arrived in [0, D)
	// after go over what the limit allows in D (limit x D/interval);
	// UtilAfter the same over [2 intervals, D), after the first two
	// windows. With a buffer b the library's ceiling is interval /
	// (interval + b): 95.2% at 50ms.
	UtilRun   float64 `json:"utilization_run"`
	UtilAfter float64 `json:"utilization_after_two_windows"`
	// Admissions is the calls admitted in Redis (the key's members, read
	// every 100ms) scored before the run's end, GivenBack those given back
	// (which do not count in Admissions); AdmissionsMax the most
	// admissions in any window of interval, and AdmissionsMaxBuffer in
	// interval + buffer (the set's invariant: at most the limit).
	Admissions          int `json:"admissions"`
	GivenBack           int `json:"given_back"`
	AdmissionsMax       int `json:"admissions_max_in_window"`
	AdmissionsMaxBuffer int `json:"admissions_max_in_window_plus_buffer"`
	// Calls is the admitted calls the replicas traced, Matched those
	// given the score of their admission (see matchScores).
	Calls   int `json:"calls"`
	Matched int `json:"matched"`
	// New and Reused split the calls by the connection they were written
	// on (httptrace's GotConnInfo.Reused), and the 429s among them.
	New        ConnSplit    `json:"new"`
	Reused     ConnSplit    `json:"reused"`
	Dial       *DistMs      `json:"dial_ms,omitempty"` // ConnectStart to TLSHandshakeDone, calls that dialed
	PerReplica []FarReplica `json:"per_replica"`
}

// ConnSplit is what the calls written on new connections, or on reused
// ones, went through, in ms: from their score to GotConn, to WroteHeaders
// and to their arrival at the API, and from their wait's return to
// GotConn; Late is how many were written more than half the buffer after
// their score (so that they reach the API later than the set allowed
// them).
type ConnSplit struct {
	Calls         int     `json:"calls"`
	Refused       int     `json:"refused"`
	Late          int     `json:"late_writes"`
	GotConnScore  *DistMs `json:"got_conn_minus_score,omitempty"`
	WroteScore    *DistMs `json:"wrote_headers_minus_score,omitempty"`
	ArrivalScore  *DistMs `json:"arrival_minus_score,omitempty"`
	GotConnWaited *DistMs `json:"got_conn_minus_waited,omitempty"`
}

// FarReplica is one replica's share of a KindFar run.
type FarReplica struct {
	Replica  int    `json:"replica"`
	Prefix   string `json:"prefix,omitempty"` // its Throttler's members' prefix
	Calls    int    `json:"calls"`            // requests that reached the API
	Refused  int    `json:"refused"`          // of which answered 429
	NewConns int    `json:"new_conns"`        // of its traced calls, written on a new connection
}

// farFigures measures a KindFar run from the API's arrivals (with their
// scores), the replicas' traces and the admissions read from Redis.
func farFigures(sc Scenario, buffer time.Duration, t0 time.Time, arrivals []fakeapi.Arrival, results []ReplicaResult,
	adm []Admission, prefixes map[int]string) *FarRow {
	f := &FarRow{OneWayMs: ms(sc.OneWay), HTTP2: sc.HTTP2, JoinAtMs: ms(joinAt(sc)), Protos: map[string]int{}}
	intervals := int((sc.Duration + sc.Interval - 1) / sc.Interval)
	f.RefusedPerInterval = make([]int, intervals)
	f.PerReplica = make([]FarReplica, sc.Procs)
	for i := range f.PerReplica {
		f.PerReplica[i] = FarReplica{Replica: i, Prefix: prefixes[i]}
	}
	var run, after int
	byCall := map[string]fakeapi.Arrival{}
	for _, a := range arrivals {
		byCall[a.Call] = a
		f.Protos[a.Proto]++
		at := a.At.Sub(t0)
		if a.Replica >= 0 && a.Replica < sc.Procs {
			f.PerReplica[a.Replica].Calls++
		}
		if a.Refused {
			f.Refused++
			if k := int(at / sc.Interval); k >= 0 && k < intervals {
				f.RefusedPerInterval[k]++
			}
			if a.Replica >= 0 && a.Replica < sc.Procs {
				f.PerReplica[a.Replica].Refused++
			}
			continue
		}
		f.Accepted++
		if at >= 0 && at < sc.Duration {
			run++
			if at >= 2*sc.Interval {
				after++
			}
		}
	}
	perSec := float64(sc.Limit) / sc.Interval.Seconds()
	f.UtilRun = float64(run) / (perSec * sc.Duration.Seconds())
	if rest := sc.Duration - 2*sc.Interval; rest > 0 {
		f.UtilAfter = float64(after) / (perSec * rest.Seconds())
	}

	var scores []int64
	end := t0.Add(sc.Duration).UnixMicro()
	for _, a := range adm {
		if a.Score >= end {
			continue // the slot of a wait the run's end abandoned
		}
		if a.GivenBack {
			f.GivenBack++
			continue
		}
		scores = append(scores, a.Score*1000)
	}
	f.Admissions = len(scores)
	f.AdmissionsMax = metrics.MaxInWindow(scores, int64(sc.Interval))
	f.AdmissionsMaxBuffer = metrics.MaxInWindow(scores, int64(sc.Interval+buffer))

	var split [2]struct {
		gotScore, wroteScore, arrScore, gotWaited []int64
	}
	var dials []int64
	for _, r := range results {
		for _, c := range r.Calls {
			f.Calls++
			k := 0 // new
			if c.Reused {
				k = 1
			}
			cs := &f.New
			if c.Reused {
				cs = &f.Reused
			} else if r.Index >= 0 && r.Index < sc.Procs {
				f.PerReplica[r.Index].NewConns++
			}
			cs.Calls++
			a, arrived := byCall[c.Call]
			if arrived && a.Refused {
				cs.Refused++
			}
			if c.GotConn > 0 && c.Waited > 0 {
				split[k].gotWaited = append(split[k].gotWaited, c.GotConn-c.Waited)
			}
			if !c.Reused && c.ConnectStart > 0 && c.TLSDone > c.ConnectStart {
				dials = append(dials, c.TLSDone-c.ConnectStart)
			}
			if !arrived || a.Score.IsZero() {
				continue
			}
			f.Matched++
			score := a.Score.UnixNano()
			if c.GotConn > 0 {
				split[k].gotScore = append(split[k].gotScore, c.GotConn-score)
			}
			if c.WroteHeaders > 0 {
				split[k].wroteScore = append(split[k].wroteScore, c.WroteHeaders-score)
				if c.WroteHeaders-score > int64(buffer/2) {
					cs.Late++
				}
			}
			split[k].arrScore = append(split[k].arrScore, a.At.UnixNano()-score)
		}
	}
	for k, cs := range []*ConnSplit{&f.New, &f.Reused} {
		cs.GotConnScore, cs.WroteScore = distMs(split[k].gotScore), distMs(split[k].wroteScore)
		cs.ArrivalScore, cs.GotConnWaited = distMs(split[k].arrScore), distMs(split[k].gotWaited)
	}
	f.Dial = distMs(dials)
	return f
}

// writeFar writes the table of KindFar rows, and the split of their
// calls by connection.
func writeFar(b *strings.Builder, rows []Row, multi bool) {
	b.WriteString(runCols("| far | impl | max in window at the API | 429s | 429s by interval | utilization: run | after 2 windows | admissions in Redis: max in window | in window + buffer | given back | calls paired with their scores | calls per replica (429s) | protocols |\n",
		"|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|\n", 1, multi))
	for _, row := range rows {
		f := row.Far
		var per []string
		for _, r := range f.PerReplica {
			per = append(per, fmt.Sprintf("%d (%d)", r.Calls, r.Refused))
		}
		var protos []string
		for p, n := range f.Protos {
			protos = append(protos, fmt.Sprintf("%s %d", p, n))
		}
		slices.Sort(protos)
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %.1f%% | %.1f%% | %s | %s | %d | %d of %d | %s | %s |\n",
			row.Scenario, row.impl(multi), optI(row.MaxInWindow, row.Limit), optI(&f.Refused, 0), joinInts(f.RefusedPerInterval),
			100*f.UtilRun, 100*f.UtilAfter, optI(&f.AdmissionsMax, row.Limit), optI(&f.AdmissionsMaxBuffer, row.Limit), f.GivenBack,
			f.Matched, f.Calls, strings.Join(per, ", "), strings.Join(protos, ", "))
	}
	b.WriteString("\n")
	dist := func(d *DistMs) string {
		if d == nil {
			return "—"
		}
		return fmt.Sprintf("%.1f / %.1f / %.1f / %.1f", d.Min, d.P50, d.P99, d.Max)
	}
	b.WriteString(runCols("| far: calls by connection (ms: min / p50 / p99 / max) | impl | connection | calls | 429s | written late | GotConn − score | WroteHeaders − score | arrival − score | GotConn − wait returned | dial + TLS |\n",
		"|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", 1, multi))
	for _, row := range rows {
		f := row.Far
		for _, c := range []struct {
			name string
			s    ConnSplit
			dial *DistMs
		}{{"new", f.New, f.Dial}, {"reused", f.Reused, nil}} {
			fmt.Fprintf(b, "| %s | %s | %s | %d | %d | %d | %s | %s | %s | %s | %s |\n",
				row.Scenario, row.impl(multi), c.name, c.s.Calls, c.s.Refused, c.s.Late,
				dist(c.s.GotConnScore), dist(c.s.WroteScore), dist(c.s.ArrivalScore), dist(c.s.GotConnWaited), dist(c.dial))
		}
	}
	b.WriteString("\n")
}
