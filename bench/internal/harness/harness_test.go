package harness

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-throttler/throttler/bench/internal/redisserver"
)

// TestMain lets the test binary serve as a replica: the smoke test
// re-executes it with ReplicaEnv set, as the harness command does itself.
func TestMain(m *testing.M) {
	if os.Getenv(ReplicaEnv) != "" {
		os.Exit(ReplicaMain())
	}
	os.Exit(m.Run())
}

func requireRedis(t *testing.T) {
	t.Helper()
	if redisserver.Available() {
		return
	}
	if os.Getenv("THROTTLER_REQUIRE_REDIS") == "1" {
		t.Fatal("redis-server is not on PATH and THROTTLER_REQUIRE_REDIS=1")
	}
	t.Skip("redis-server is not on PATH (set THROTTLER_REQUIRE_REDIS=1 to make this a failure)")
}

// TestSmoke runs the saturate scenario, shrunk to 2 processes x 4 goroutines
// for 1.5s, against this library, through the whole harness: redis-server,
// fake API, replica processes, metrics, the attribution with every call
// listed, and every output format.
func TestSmoke(t *testing.T) {
	rep, row := smokeWith(t, "saturate", []string{"throttler"}, Options{Calls: true}, func(sc *Scenario) {
		sc.Procs, sc.Goroutines, sc.Duration = 2, 4, 1500*time.Millisecond
	})
	switch {
	case row.Admitted == 0:
		t.Fatal("nothing admitted")
	case row.Errors != 0 || row.APIErrors != 0:
		t.Fatalf("%d wait errors, %d API errors: %s", row.Errors, row.APIErrors, row.FirstError)
	case int64(row.APICalls) != row.Admitted:
		t.Errorf("%d calls reached the API, %d were admitted", row.APICalls, row.Admitted)
	case row.Utilization == nil || *row.Utilization <= 0:
		t.Errorf("utilization %v", row.Utilization)
	case row.RoundTrips == 0 || row.CommandsPerAdm == 0:
		t.Errorf("no Redis traffic counted: %d round trips, %.2f commands/admission", row.RoundTrips, row.CommandsPerAdm)
	case len(row.PerProc) != 2 || row.Jain == nil:
		t.Errorf("per-process counts %v, Jain %v", row.PerProc, row.Jain)
	case len(row.Series) == 0:
		t.Error("no series for the chart")
	}
	// The library's guarantee, checked at the API.
	if *row.MaxInWindow > row.Limit || *row.StrictRejects != 0 {
		t.Errorf("max in window %d (limit %d), strict rejects %d", *row.MaxInWindow, row.Limit, *row.StrictRejects)
	}
	// Every call carried its score and times to the API, and each replica
	// timed its clock samples.
	a := row.Attrib
	switch {
	case a == nil:
		t.Fatal("no attribution")
	case a.Calls != row.APICalls || a.Scored != a.Calls:
		t.Errorf("attribution: %d calls, %d with a score; %d at the API", a.Calls, a.Scored, row.APICalls)
	case a.ScoresMax == 0 || a.ScoresMax > row.Limit:
		t.Errorf("attribution: at most %d scores in a window of interval + buffer, limit %d", a.ScoresMax, row.Limit)
	case a.All.ArrivalScore == nil || a.All.ReturnedScore == nil || a.All.ArrivalReturned == nil || a.All.ArrivalReturned.Min < 0:
		t.Errorf("attribution: distributions %+v", a.All)
	case a.Conns.New == 0 || a.Conns.Dialed == 0 || a.Conns.AcceptSent == nil || a.Conns.AcceptSent.Min < 0 || a.Conns.ArrivalAccept.Min < 0:
		t.Errorf("attribution: connections %+v", a.Conns)
	case len(a.CallList) != a.Calls || a.CallList[0].ScoreMs == nil || a.CallList[0].EstOffsetMs == nil:
		t.Errorf("attribution: %d calls listed of %d, the first %+v", len(a.CallList), a.Calls, a.CallList[0])
	case len(a.Replicas) != 2 || a.Replicas[0].Clock.Samples == 0 || a.Replicas[0].Clock.First == nil:
		t.Errorf("attribution: replicas %+v", a.Replicas)
	case a.Tightest != nil && (a.Tightest.MarginMs < 0 || a.Tightest.ScoresSpanMs == nil || *a.Tightest.ScoresSpanMs < row.IntervalMs+50):
		t.Errorf("attribution: tightest group %+v", *a.Tightest)
	}
	checkOutputs(t, rep)
}

// TestSmokeLLM runs the llm scenario, shrunk to 2 processes x 4 goroutines
// on a 1s window for 3s, through the whole harness, and checks what it
// guarantees: no 429, no window over either limit at the API, no error.
func TestSmokeLLM(t *testing.T) {
	rep, row := smoke(t, "llm", nil, func(sc *Scenario) {
		sc.Procs, sc.Goroutines, sc.Interval, sc.Warmup, sc.Duration = 2, 4, time.Second, time.Second, 3*time.Second
	})
	l := row.LLM
	if l == nil {
		t.Fatalf("row %+v, want an llm row", row)
	}
	switch {
	case row.Admitted == 0 || l.Calls == 0:
		t.Fatalf("%d admitted, %d calls at the API", row.Admitted, l.Calls)
	case row.Errors != 0 || row.APIErrors != 0:
		t.Fatalf("%d errors, %d API errors: %s", row.Errors, row.APIErrors, row.FirstError)
	case l.Rejected != 0:
		t.Errorf("%d 429s, want none: estimates cover every call", l.Rejected)
	case l.MaxTokens > l.TokenLimit || l.MaxRequests > l.RequestLimit:
		t.Errorf("a window held %d tokens and %d requests; limits %d, %d", l.MaxTokens, l.MaxRequests, l.TokenLimit, l.RequestLimit)
	case row.RoundTrips == 0 || row.CommandsPerAdm == 0:
		t.Errorf("no Redis traffic counted: %d round trips, %.2f commands/call", row.RoundTrips, row.CommandsPerAdm)
	case row.Utilization == nil:
		t.Error("no utilization")
	}
	checkOutputs(t, rep)
}

func checkOutputs(t *testing.T, rep *Report) {
	t.Helper()
	md := rep.Markdown()
	for _, r := range rep.Rows {
		if !strings.Contains(md, "| "+r.Scenario+" | "+r.Impl+" |") {
			t.Errorf("Markdown lacks the row %s/%s:\n%s", r.Scenario, r.Impl, md)
		}
	}
	b, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || len(back.Rows) != len(rep.Rows) {
		t.Errorf("JSON does not round-trip: %v", err)
	}
	if !slices.ContainsFunc(rep.Rows, func(r Row) bool { return len(r.Series) > 0 }) {
		return // nothing to chart
	}
	svg := rep.SVG()
	if !strings.HasPrefix(svg, "<svg") {
		t.Fatalf("SVG: %.80q", svg)
	}
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := d.Token(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("SVG is not well-formed XML: %v", err)
			}
			break
		}
	}
}

// TestOutputs renders a made-up report without running anything.
func TestOutputs(t *testing.T) {
	u, mx, rej, j := 0.95, 100, 0, 0.99
	over := 120
	rep := &Report{
		Meta: Meta{OS: "linux/amd64", CPUs: 2, RedisVersion: "7", GoVersion: "go1", BufferMs: 50},
		Scenarios: []ScenarioInfo{
			{Name: "saturate", Kind: KindAPI, Procs: 3, Goroutines: 50, Limit: 100, IntervalMs: 1000, DurationS: 2, Description: "saturate <&>"},
			{Name: "latency", Kind: KindLatency, Procs: 1, Goroutines: 1, Limit: 1e6, IntervalMs: 1000, DurationS: 1},
		},
		Rows: []Row{
			{Scenario: "saturate", Impl: "throttler", Limit: 100, Utilization: &u, MaxInWindow: &mx, StrictRejects: &rej, Jain: &j,
				SeriesStepMs: 500, Series: []int{100, 100, 95, 100}},
			{Scenario: "saturate", Impl: "redis_rate", Limit: 100, Utilization: &u, MaxInWindow: &over, StrictRejects: &over,
				SeriesStepMs: 500, Series: []int{120, 100, 100, 100}, Errors: 1, FirstError: "boom"},
			{Scenario: "latency", Impl: "seed", Limit: 1e6},
			{Scenario: "llm", Impl: "throttler", Limit: 10000, Utilization: &u, MaxInWindow: &mx, StrictRejects: &rej,
				LLM: &LLMRow{TokenLimit: 10000, RequestLimit: 60, Calls: 70, Rejected: 2, RejectedAfterWarmup: 1, TokensPerInterval: 9500, MaxTokens: 9900, MaxRequests: 61}},
			{Scenario: "storm", Impl: "throttler", Limit: 100, Utilization: &u, MaxInWindow: &mx, StrictRejects: &rej, CommandsPerAdm: 4.5,
				Storm: &StormRow{WaitCalls: 5000, Admitted: 500, Failed: 4500, RoundTripsPerWait: 0.25, EarlyShare: 0.9, FailedAtP50: 0.02, FailedAtP99: 1.05}},
			{Scenario: "priority", Impl: "throttler", Limit: 100, Utilization: &u, MaxInWindow: &mx, StrictRejects: &rej, RoundTripsPerAdm: 0.5,
				Priority: &PriorityRow{LowShare: 0.9, HighArrived: 300, HighAdmitted: 298, HighP50Ms: 0.2, HighP99Ms: 950, HighMaxMs: 1200, LowAdmitted: 650, LowPerSec: 65}},
		},
		Latency: []LatencyRow{{Impl: "seed", PingP50Us: 50, WaitP50Us: 100, RatioP50: 2}},
		Memory:  []MemoryRow{{Impl: "seed", Calls: 10, Members: 10, Bytes: 1380, BytesPerMember: 138}},
	}
	checkOutputs(t, rep)
	md := rep.Markdown()
	for _, want := range []string{"**120**", "| latency | seed | 0.0 | — | — | — |", "| seed | 10 | 10 | 1380 | 138.0 |", "boom", "95.0%",
		"| llm | throttler | 70 | **2** | **1** | 9500 | 95.0% | 9900 | **61** |",
		"| storm | throttler | 5000 | 4500 | 0.250 | 500 | 4.50 | 95.0% | 100 | 0 |", "| 90.0% | 2% | 105% |",
		"| priority | throttler | 0.90 | the same | 300 | 298 | 200µs | 950ms | 1.20s | 650 | 65.0 | 95.0% | 100 | 0 | 0.50 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(rep.SVG(), "<&>") {
		t.Error("SVG does not escape text")
	}
	if strings.Contains(md, "Windows over the limit") {
		t.Errorf("an attribution section with no window over the limit:\n%s", md)
	}
}

// TestOutputsRuns renders a made-up report of two runs, one with a window
// over the limit, attributed.
func TestOutputsRuns(t *testing.T) {
	u1, u2, mx1, mx2, rej1, rej2, j := 0.95, 0.951, 100, 119, 0, 19, 0.99
	win := OverWindow{FromMs: 1000, ToMs: 1010, PeakStartMs: 3.5, Peak: 119, Excess: 19, First: true, Accounted: 100,
		PeakIntruders: map[string]int{"early": 12, "late send": 7}, ScoresMax: 100, Cause: "early 12, late send 7",
		IntruderReplicas: map[int]int{4: 12, 9: 7}, APIStalledMs: 85, PeakIntrudersDialed: 3}
	first := &SampleMs{SentMs: 2, RTTMs: 80, OffsetMs: 31}
	rep := &Report{
		Meta:      Meta{OS: "linux/amd64", CPUs: 2, RedisVersion: "7", GoVersion: "go1", BufferMs: 50, Runs: 2},
		Scenarios: []ScenarioInfo{{Name: "herd24", Kind: KindAPI, Procs: 24, Goroutines: 25, Limit: 100, IntervalMs: 1000, DurationS: 2, Impls: []string{"throttler"}}},
		Rows: []Row{
			{Scenario: "herd24", Impl: "throttler", Run: 1, Limit: 100, IntervalMs: 1000, Utilization: &u1, MaxInWindow: &mx1, StrictRejects: &rej1, Jain: &j,
				AdmittedPerSec: 95, RoundTripsPerAdm: 1.5, WaitP99Ms: 7000, Attrib: &AttribRow{Calls: 950, Tightest: &TightestGroup{MarginMs: 12.5}}},
			{Scenario: "herd24", Impl: "throttler", Run: 2, Limit: 100, IntervalMs: 1000, Utilization: &u2, MaxInWindow: &mx2, StrictRejects: &rej2, Jain: &j,
				AdmittedPerSec: 95.1, RoundTripsPerAdm: 1.6, WaitP99Ms: 7100, Attrib: &AttribRow{Calls: 969, Excess: 19, Windows: []OverWindow{win}, Tightest: &TightestGroup{MarginMs: -40},
					All:      Deltas{ArrivalScore: &DistMs{N: 969, Min: -60, P50: 1, P99: 20, Max: 30}},
					Replicas: []AttribReplica{{Replica: 4, Intruders: 12, Classes: map[string]int{"early": 12}, Clock: ClockRow{Samples: 40, First: first, EstOffsetFirstMinMs: 2, EstOffsetFirstMaxMs: 31}}, {Replica: 5}}}},
		},
	}
	rep.Summary = summarize(rep.Rows)
	checkOutputs(t, rep)
	md := rep.Markdown()
	for _, want := range []string{
		"| scenario | impl | run | admitted/s |",
		"| herd24 | throttler | 2 | 95.1 | 95.1% | **119** | **19** | 1.60 |",
		"| herd24 | throttler | 2 | **1** (run 2) | 100, 119 | 0, 19 | -40.0ms (run 2) | 95.0–95.1 | 95.0%–95.1% | 1.50–1.60 |",
		"| herd24 | throttler | 2 | (3.5, 1003.5] | 119 | 19 | yes | 100 | 12 | 0 | 0 | 7 | 0 (intruders that dialed: 3) | 85 | 4 (12), 9 (7) | 100 | early 12, late send 7 |",
		"| herd24 | throttler | 2 | all | 0 | -60.0 / 1.0 / 20.0 / 30.0 | — | — |",
		"| herd24 | throttler | 2 | 4 | 12 | 12, 0, 0, 0, 0 | — | — | 2.0, 80.00, +31.00 | +2.00 to +31.00 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| herd24 | throttler | 2 | 5 |") {
		t.Errorf("a replica without intruders in the table:\n%s", md)
	}
	if s := rep.Summary; len(s) != 1 || s[0].Runs != 2 || !slices.Equal(s[0].RunsOver, []int{2}) || s[0].Jain == nil || *s[0].Margin != (Range{-40, 12.5}) {
		t.Errorf("Summary = %+v", s)
	}
}

func TestSelect(t *testing.T) {
	all := Scenarios(false)
	before := slices.Clone(all[0].Impls)
	got, err := Select(all, []string{"herd", "memory"}, []string{"seed"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "herd" || got[1].Name != "memory" || len(got[0].Impls) != 1 || got[0].Impls[0] != "seed" {
		t.Errorf("Select = %+v", got)
	}
	if !slices.Equal(all[0].Impls, before) {
		t.Errorf("Select modified its input: %v", all[0].Impls)
	}
	if _, err := Select(all, []string{"nope"}, nil); err == nil {
		t.Error("unknown scenario accepted")
	}
	if _, err := Select(all, nil, []string{"nope"}); err == nil {
		t.Error("unknown implementation accepted")
	}
	if _, err := Select(all, []string{"memory"}, []string{"xrate"}); err == nil {
		t.Error("an empty selection accepted")
	}
	// The opt-in scenarios run only when named.
	def, err := Select(all, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range def {
		if slices.Contains(OptInNames, s.Name) {
			t.Errorf("%s runs by default", s.Name)
		}
	}
	if got, err := Select(all, OptInNames, nil); err != nil || len(got) != len(OptInNames) {
		t.Errorf("Select(%v) = %d scenarios, %v", OptInNames, len(got), err)
	}
	for _, n := range ScenarioNames {
		if !slices.ContainsFunc(all, func(s Scenario) bool { return s.Name == n }) {
			t.Errorf("ScenarioNames lists %s, which Scenarios lacks", n)
		}
	}
}

func TestFmtMs(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.0005: "500ns", 0.121: "121µs", 5.123: "5.12ms", 42: "42ms", 1500: "1.50s"} {
		if got := fmtMs(v); got != want {
			t.Errorf("fmtMs(%v) = %q, want %q", v, got, want)
		}
	}
}

// testWriter logs whole lines (the progress output writes a line in parts).
type testWriter struct {
	t   *testing.T
	buf *strings.Builder
}

func (w testWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if s := w.buf.String(); strings.HasSuffix(s, "\n") {
		w.t.Log(strings.TrimSuffix(s, "\n"))
		w.buf.Reset()
	}
	return len(p), nil
}

// TestSmokeInFlight runs the inflight scenario, shrunk to 2 processes x 6
// goroutines for a cap of 3, for 1.5s: the cap holds at the API, and the
// figures are filled in.
func TestSmokeInFlight(t *testing.T) {
	rep, row := smoke(t, "inflight", nil, func(sc *Scenario) {
		sc.Procs, sc.Goroutines, sc.InFlight, sc.Duration, sc.Warmup = 2, 6, 3, 1500*time.Millisecond, 500*time.Millisecond
	})
	f := row.InFlight
	if f == nil {
		t.Fatalf("row %+v, want in-flight figures", row)
	}
	switch {
	case row.Admitted == 0:
		t.Fatal("nothing admitted")
	case row.Errors != 0 || row.APIErrors != 0:
		t.Fatalf("%d wait errors, %d API errors: %s", row.Errors, row.APIErrors, row.FirstError)
	case int64(row.APICalls) != row.Admitted:
		t.Errorf("%d calls reached the API, %d were admitted", row.APICalls, row.Admitted)
	case f.Max > f.Cap || f.OverCap != 0:
		t.Errorf("in flight at the API: most %d, cap %d, %d refused over it", f.Max, f.Cap, f.OverCap)
	case f.Utilization <= 0 || f.Reservations == 0 || row.CommandsPerAdm == 0:
		t.Errorf("figures missing: %+v, %.2f commands/admission", *f, row.CommandsPerAdm)
	}
	if md := rep.Markdown(); !strings.Contains(md, "| inflight") {
		t.Errorf("no inflight table in:\n%s", md)
	}
}

// TestSmokeStorm runs the storm scenario, shrunk to 2 processes x 20
// goroutines on 10 per 1s for 2s: Waits fail by their deadline, the limit
// holds at the API, and the storm's figures are filled in.
func TestSmokeStorm(t *testing.T) {
	rep, row := smoke(t, "storm", []string{"throttler"}, func(sc *Scenario) {
		sc.Procs, sc.Goroutines, sc.Limit, sc.Duration, sc.Warmup = 2, 20, 10, 2*time.Second, 500*time.Millisecond
	})
	f := row.Storm
	if f == nil {
		t.Fatalf("row %+v, want the storm's figures", row)
	}
	switch {
	case row.Admitted == 0 || f.Failed == 0:
		t.Fatalf("%d admitted, %d failed: want both", row.Admitted, f.Failed)
	case row.Errors != 0 || row.APIErrors != 0:
		t.Fatalf("%d wait errors, %d API errors: %s", row.Errors, row.APIErrors, row.FirstError)
	case int64(row.APICalls) != row.Admitted || f.WaitCalls != f.Admitted+f.Failed:
		t.Errorf("%d calls reached the API, %d admitted, %d Wait calls, %d failed", row.APICalls, row.Admitted, f.WaitCalls, f.Failed)
	case f.FailedMeasured == 0 || f.FailedAtP50 <= 0 || f.RoundTripsPerWait <= 0:
		t.Errorf("figures missing: %+v", *f)
	case *row.MaxInWindow > row.Limit || *row.StrictRejects != 0:
		t.Errorf("max in window %d (limit %d), strict rejects %d", *row.MaxInWindow, row.Limit, *row.StrictRejects)
	case len(row.PerProcPerInterval) != 2 || len(row.PerProcPerInterval[0]) != 2:
		t.Errorf("per-process counts per interval: %v", row.PerProcPerInterval)
	}
	if md := rep.Markdown(); !strings.Contains(md, "| storm | throttler |") {
		t.Errorf("no storm table in:\n%s", md)
	}
}

// TestSmokePriority runs the priority scenario, shrunk to 2 processes,
// each with high-priority calls at 4/s and 10 low-priority goroutines, on
// 20 per 1s for 2s, the low calls capped at half the limit on a Throttler
// of their own that does not reserve ahead (so that the high calls, which
// would otherwise wait about a second behind them, are measured within
// the run): both priorities get through, the limit holds at the API, and
// the priority figures are filled in.
func TestSmokePriority(t *testing.T) {
	var ahead time.Duration
	rep, row := smokeWith(t, "priority", nil, Options{LowShare: 0.5, LowAhead: &ahead}, func(sc *Scenario) {
		sc.Procs, sc.Goroutines, sc.HighRate, sc.Limit, sc.Duration, sc.Warmup = 2, 10, 4, 20, 2*time.Second, 500*time.Millisecond
	})
	f := row.Priority
	if f == nil {
		t.Fatalf("row %+v, want the priority figures", row)
	}
	switch {
	case f.HighAdmitted == 0 || f.LowAdmitted == 0 || f.HighMeasured == 0:
		t.Fatalf("%d high (%d measured) and %d low calls admitted: want both", f.HighAdmitted, f.HighMeasured, f.LowAdmitted)
	case row.Errors != 0 || row.APIErrors != 0:
		t.Fatalf("%d wait errors, %d API errors: %s", row.Errors, row.APIErrors, row.FirstError)
	case int64(row.APICalls) != row.Admitted || f.HighAdmitted+f.LowAdmitted != row.Admitted:
		t.Errorf("%d calls reached the API, %d admitted: %d high, %d low", row.APICalls, row.Admitted, f.HighAdmitted, f.LowAdmitted)
	case f.HighArrived < f.HighAdmitted || f.LowShare != 0.5 || f.LowAheadMs == nil || f.HighMaxMs < f.HighP99Ms || len(f.High) != f.HighMeasured:
		t.Errorf("figures inconsistent: %+v", *f)
	case *row.MaxInWindow > row.Limit || *row.StrictRejects != 0:
		t.Errorf("max in window %d (limit %d), strict rejects %d", *row.MaxInWindow, row.Limit, *row.StrictRejects)
	}
	if md := rep.Markdown(); !strings.Contains(md, "| priority | throttler | 0.50 | own, ahead 0 |") {
		t.Errorf("no priority table in:\n%s", md)
	}
}

// smoke runs the quick scenario called name with the implementations
// named (nil: its own), shrunk, through the whole harness within 45s, and
// returns the report and its one row.
func smoke(t *testing.T, name string, implNames []string, shrink func(*Scenario)) (*Report, Row) {
	t.Helper()
	return smokeWith(t, name, implNames, Options{}, shrink)
}

// smokeWith is smoke with opt's Options (their Scenarios, Buffer and
// Progress are smoke's).
func smokeWith(t *testing.T, name string, implNames []string, opt Options, shrink func(*Scenario)) (*Report, Row) {
	t.Helper()
	requireRedis(t)
	all, err := Select(Scenarios(true), []string{name}, implNames)
	if err != nil {
		t.Fatal(err)
	}
	sc := all[0]
	shrink(&sc)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	opt.Scenarios, opt.Buffer, opt.Progress = []Scenario{sc}, 50*time.Millisecond, testWriter{t, &strings.Builder{}}
	rep, err := Run(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rep.Rows))
	}
	t.Logf("row: %s", rep.Rows[0].summary())
	return rep, rep.Rows[0]
}

func TestStalledIn(t *testing.T) {
	stalls := []StallMs{{AtMs: 10, LenMs: 20}, {AtMs: 50, LenMs: 5}}
	for _, c := range []struct {
		from, to int64 // ms
		want     float64
	}{
		{0, 100, 25}, {15, 52, 17}, {30, 50, 0}, {0, 10, 0}, {54, 60, 1},
	} {
		if got := stalledIn(stalls, c.from*1e6, c.to*1e6); got != c.want {
			t.Errorf("stalledIn [%d, %d) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

// TestSmokeKeys runs the keys scenario on 200 keys, 3 calls each: every
// implementation fills in its figures (on so few keys, used_memory's
// own noise swamps the bytes per key: the figures mean something at the
// scenario's 100,000), and the report has its table.
func TestSmokeKeys(t *testing.T) {
	requireRedis(t)
	all, err := Select(Scenarios(true), []string{"keys"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := all[0]
	sc.Keys, sc.Calls, sc.Goroutines = 200, 3, 8
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	rep, err := Run(ctx, Options{Scenarios: []Scenario{sc}, Buffer: 50 * time.Millisecond, Progress: testWriter{t, &strings.Builder{}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Keys) != len(sc.Impls) {
		t.Fatalf("%d keys rows, want one per implementation of %v", len(rep.Keys), sc.Impls)
	}
	for _, k := range rep.Keys {
		if k.Keys != 200 || k.Calls != 3 || k.BytesFirst <= 0 || k.UsageAll <= 0 {
			t.Errorf("%s: %+v, want every figure", k.Impl, k)
		}
	}
	if md := rep.Markdown(); !strings.Contains(md, "| memory (many keys) |") {
		t.Errorf("no keys table in:\n%s", md)
	}
}

// The implementations that are no limiters run only where they mean
// something: floor in the keys scenario, three-commands in the latency
// scenario.
func TestScenariosRunNoLimiterElsewhere(t *testing.T) {
	only := map[string]string{"floor": "keys", "three-commands": "latency"}
	for _, quick := range []bool{false, true} {
		for _, sc := range Scenarios(quick) {
			for _, impl := range sc.Impls {
				if where, ok := only[impl]; ok && sc.Name != where {
					t.Errorf("scenario %s runs %s, which is for %s only", sc.Name, impl, where)
				}
			}
		}
	}
}
