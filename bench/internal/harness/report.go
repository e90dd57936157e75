package harness

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Report is everything one harness run measured.
type Report struct {
	Meta      Meta           `json:"meta"`
	Scenarios []ScenarioInfo `json:"scenarios"`
	Rows      []Row          `json:"rows"`
	Latency   []LatencyRow   `json:"latency,omitempty"`
	Memory    []MemoryRow    `json:"memory,omitempty"`
	Keys      []KeysRow      `json:"keys,omitempty"`
	// Summary sums up the runs of each scenario and implementation whose
	// rows have a max in window, when each ran more than once (-runs).
	Summary []SummaryRow `json:"summary,omitempty"`
	// TenantTargets are issue 43's targets as the tenants scenarios of
	// each run measured them (see tenantTargets).
	TenantTargets []TenantTarget `json:"tenant_targets,omitempty"`
}

// Meta describes the machine and the run.
type Meta struct {
	Started      string  `json:"started"`
	GoVersion    string  `json:"go_version"`
	OS           string  `json:"os"`
	CPUs         int     `json:"cpus"`
	RedisVersion string  `json:"redis_version"`
	Quick        bool    `json:"quick"`
	BufferMs     float64 `json:"buffer_ms"`
	Runs         int     `json:"runs"` // runs of each scenario and implementation
}

// ScenarioInfo is a scenario's parameters, as run.
type ScenarioInfo struct {
	Name        string   `json:"name"`
	Kind        Kind     `json:"kind"`
	Procs       int      `json:"procs,omitempty"`
	Goroutines  int      `json:"goroutines"`
	Limit       int      `json:"limit"`
	IntervalMs  float64  `json:"interval_ms"`
	DurationS   float64  `json:"duration_s,omitempty"`
	WarmupS     float64  `json:"warmup_s,omitempty"`
	Calls       int      `json:"calls,omitempty"`
	Impls       []string `json:"impls"`
	Description string   `json:"description"`
}

// Row is one scenario run with one implementation.
type Row struct {
	Scenario   string  `json:"scenario"`
	Impl       string  `json:"impl"`
	Run        int     `json:"run"` // 1, 2, ... up to Meta.Runs
	Procs      int     `json:"procs"`
	Goroutines int     `json:"goroutines"`
	Limit      int     `json:"limit"`
	IntervalMs float64 `json:"interval_ms"`
	DurationS  float64 `json:"duration_s"`

	Admitted int64 `json:"admitted"`  // successful waits, whole run, all replicas
	Measured int64 `json:"measured"`  // of which after the warm-up (replica clocks)
	APICalls int   `json:"api_calls"` // arrivals at the API, whole run
	// APICallsMeasured counts arrivals in [Warmup, Duration).
	APICallsMeasured int     `json:"api_calls_measured"`
	AdmittedPerSec   float64 `json:"admitted_per_sec"` // after the warm-up (at the API when there is one)
	// Utilization is AdmittedPerSec / (limit/interval); only when throttled.
	Utilization   *float64 `json:"utilization,omitempty"`
	MaxInWindow   *int     `json:"max_in_window,omitempty"`  // most API arrivals in any window of length interval
	StrictRejects *int     `json:"strict_rejects,omitempty"` // arrivals a strict sliding-window API would reject

	RoundTrips       int64            `json:"round_trips"`
	RoundTripsPerAdm float64          `json:"round_trips_per_admission"`
	CommandsPerAdm   float64          `json:"commands_per_admission"`
	Commands         map[string]int64 `json:"commands"` // INFO commandstats delta, overhead left out
	RedisCPUMs       float64          `json:"redis_cpu_ms"`
	RedisCPUUsPerAdm float64          `json:"redis_cpu_us_per_admission"`

	PerProc []int64  `json:"per_proc"`       // admissions per process after the warm-up
	Jain    *float64 `json:"jain,omitempty"` // Jain's index of PerProc; only with several processes
	// PerProcPerInterval[p][k] is how many of process p's calls reached
	// the API in [k·interval, (k+1)·interval) after the start, whole run.
	PerProcPerInterval [][]int `json:"per_proc_per_interval,omitempty"`
	// PerProcRoundTrips is each process's Redis round trips, whole run.
	PerProcRoundTrips []int64 `json:"per_proc_round_trips,omitempty"`
	// PerProcLateWakes is, for this library, each process's calls woken
	// too late for their slot, which reserved again (Stats.Sends.LateWakes).
	PerProcLateWakes []int64 `json:"per_proc_late_wakes,omitempty"`

	WaitP50Ms float64 `json:"wait_p50_ms"`
	WaitP99Ms float64 `json:"wait_p99_ms"`

	Errors     int64  `json:"errors"`
	APIErrors  int64  `json:"api_errors"`
	FirstError string `json:"first_error,omitempty"`
	Unfinished int    `json:"unfinished"` // goroutines still waiting at the end

	// LLM is what the fake LLM API saw, for a KindLLM row (whose
	// Utilization, MaxInWindow and StrictRejects are then the tokens' and
	// the API's 429s).
	LLM *LLMRow `json:"llm,omitempty"`

	// InFlight: the inflight scenario's figures.
	InFlight *InFlightRow `json:"inflight,omitempty"`

	// Storm: a KindStorm run's figures.
	Storm *StormRow `json:"storm,omitempty"`

	// Priority: a KindPriority run's figures.
	Priority *PriorityRow `json:"priority,omitempty"`

	// Far: a KindFar run's figures.
	Far *FarRow `json:"far,omitempty"`

	// Fault: a KindRedisFault run's figures.
	Fault *FaultRow `json:"redis_fault,omitempty"`

	// Tenants: a KindTenants run's figures.
	Tenants *TenantsRow `json:"tenants,omitempty"`

	// Stats is this library's Stats from each replica at its end, whole
	// (by replica; the runs of this library whose kind reportsStats): see
	// libstats.go.
	Stats []json.RawMessage `json:"library_stats,omitempty"`

	// Attrib attributes the windows over the limit at the API to their
	// calls, in the scenarios that call it.
	Attrib *AttribRow `json:"attribution,omitempty"`

	SeriesStepMs int64 `json:"series_step_ms,omitempty"`
	// Series[i] is the number of API arrivals in the window of length
	// interval ending at (i+1)·SeriesStepMs after the start.
	Series []int `json:"series,omitempty"`
}

// InFlightRow is what the inflight scenario measures besides a Row's figures.
type InFlightRow struct {
	Cap     int     `json:"cap"`      // the API's cap and WithInFlight's n
	Max     int     `json:"max"`      // the most calls in flight at the API at once, a refused arrival counted
	Mean    float64 `json:"mean"`     // time-weighted mean in flight over the measured span
	OverCap int     `json:"over_cap"` // calls the API refused for the cap
	// Utilization is Mean / Cap.
	Utilization float64 `json:"utilization"`
	// Reservations is the library's Stats.Redis.RoundTrips (reservation round
	// trips, summed over processes); Row.RoundTrips counts every round trip,
	// the give-backs and renewals of places too.
	Reservations       int64   `json:"reservations"`
	ReservationsPerAdm float64 `json:"reservations_per_admission"`
	LeaseWaits         int64   `json:"lease_waits"` // the library's Stats.Places.Waits, summed
	LeaseWaitsPerAdm   float64 `json:"lease_waits_per_admission"`
}

// StormRow is what a KindStorm run measures besides a Row's figures. Wait
// calls and round trips are over the whole run; the failed Waits' timing
// after the warm-up.
type StormRow struct {
	WaitCalls         int64   `json:"wait_calls"` // Admitted + Failed
	Admitted          int64   `json:"admitted"`
	Failed            int64   `json:"failed"` // Waits that failed by their deadline
	RoundTripsPerWait float64 `json:"round_trips_per_wait"`
	// FailedMeasured is the failed Waits that returned after the warm-up,
	// FailedEarly those of them that returned before their deadline
	// (refused at once, their slot lying beyond it), and EarlyShare the
	// ratio.
	FailedMeasured int64   `json:"failed_measured"`
	FailedEarly    int64   `json:"failed_early"`
	EarlyShare     float64 `json:"early_share"`
	// FailedAtP50 and FailedAtP99: when the failed Waits returned, as a
	// fraction of their deadline (1: at the deadline; above 1: late).
	FailedAtP50 float64 `json:"failed_at_p50"`
	FailedAtP99 float64 `json:"failed_at_p99"`
}

// PriorityRow is what a KindPriority run measures besides a Row's figures
// (which count both priorities).
type PriorityRow struct {
	LowShare float64 `json:"low_share"` // PriorityLow's share of the limit
	// LowAheadMs is the reserve-ahead of the low-priority calls' own
	// Throttler; nil when they share the high ones'.
	LowAheadMs *float64 `json:"low_ahead_ms,omitempty"`
	// HighArrived, HighAdmitted and HighUnfinished: the high-priority calls
	// that arrived, were admitted and were still waiting at the end, whole
	// run.
	HighArrived    int64 `json:"high_arrived"`
	HighAdmitted   int64 `json:"high_admitted"`
	HighUnfinished int   `json:"high_unfinished"`
	// HighMeasured is the high-priority calls that arrived after the
	// warm-up and were admitted; their waits' percentiles and maximum
	// follow.
	HighMeasured int     `json:"high_measured"`
	HighP50Ms    float64 `json:"high_wait_p50_ms"`
	HighP99Ms    float64 `json:"high_wait_p99_ms"`
	HighMaxMs    float64 `json:"high_wait_max_ms"`
	// LowAdmitted is the low-priority calls admitted, whole run, and
	// LowPerSec those admitted after the warm-up, per second.
	LowAdmitted int64   `json:"low_admitted"`
	LowPerSec   float64 `json:"low_per_sec"`
	// High is every measured high-priority call, by arrival (JSON only).
	High []HighCall `json:"high,omitempty"`
}

// HighCall is one measured high-priority call: its replica, when it
// arrived (after the replica's start) and how long it waited.
type HighCall struct {
	Replica int     `json:"replica"`
	AtMs    float64 `json:"at_ms"`
	WaitMs  float64 `json:"wait_ms"`
}

// LatencyRow is the latency scenario for one implementation.
type LatencyRow struct {
	Impl      string  `json:"impl"`
	Run       int     `json:"run"`
	Samples   int     `json:"samples"`
	PingP50Us float64 `json:"ping_p50_us"`
	PingP99Us float64 `json:"ping_p99_us"`
	WaitP50Us float64 `json:"wait_p50_us"`
	WaitP99Us float64 `json:"wait_p99_us"`
	RatioP50  float64 `json:"wait_over_ping_p50"`
}

// MemoryRow is the memory scenario for one implementation.
type MemoryRow struct {
	Impl           string  `json:"impl"`
	Run            int     `json:"run"`
	Calls          int     `json:"calls"`
	Members        int64   `json:"members"`
	Keys           int     `json:"keys"`
	Bytes          int64   `json:"bytes"` // MEMORY USAGE ... SAMPLES 0, summed over the keys
	BytesPerMember float64 `json:"bytes_per_member"`
	AdmitSeconds   float64 `json:"admit_seconds"`
	// After the scenario's Rest and one more call (when it has a Rest).
	RestSeconds float64 `json:"rest_seconds,omitempty"`
	RestMembers int64   `json:"rest_members,omitempty"`
	RestBytes   int64   `json:"rest_bytes,omitempty"`
}

// JSON returns the report, indented.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// Markdown returns the report as Markdown tables, ready for a README.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %d CPUs, Redis %s, %s; buffer %s%s.\n\n", r.Meta.OS, r.Meta.CPUs, r.Meta.RedisVersion,
		r.Meta.GoVersion, fmtMs(r.Meta.BufferMs), map[bool]string{true: "; quick run", false: ""}[r.Meta.Quick])
	multi := r.Meta.Runs > 1
	var rows, llm, inflight, storm, prio, far, faults, tenants []Row
	for _, row := range r.grouped() {
		switch {
		case row.Far != nil:
			far = append(far, row)
		case row.Fault != nil:
			faults = append(faults, row)
		case row.LLM != nil:
			llm = append(llm, row)
		case row.InFlight != nil:
			inflight = append(inflight, row)
		case row.Storm != nil:
			storm = append(storm, row)
		case row.Priority != nil:
			prio = append(prio, row)
		case row.Tenants != nil:
			tenants = append(tenants, row)
		default:
			rows = append(rows, row)
		}
	}
	if len(rows) > 0 {
		b.WriteString(runCols("| scenario | impl | admitted/s | utilization | max in window | strict rejects | RT/adm | cmds/adm | Redis CPU µs/adm | Jain | wait p50 | wait p99 |\n",
			"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", 1, multi))
		for _, row := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.2f | %.2f | %.1f | %s | %s | %s |\n",
				row.Scenario, row.impl(multi), fmtRate(row.AdmittedPerSec),
				optF(row.Utilization, func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }),
				optI(row.MaxInWindow, row.Limit), optI(row.StrictRejects, 0),
				row.RoundTripsPerAdm, row.CommandsPerAdm, row.RedisCPUUsPerAdm,
				optF(row.Jain, func(v float64) string { return fmt.Sprintf("%.3f", v) }),
				fmtMs(row.WaitP50Ms), fmtMs(row.WaitP99Ms))
		}
		b.WriteString("\n")
	}
	if len(llm) > 0 {
		b.WriteString(runCols("| llm | impl | calls | 429s | 429s after warm-up | tokens per interval | token utilization | max tokens in a window | max requests in a window | RT/call | cmds/call | Redis CPU µs/call | Jain |\n",
			"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", 1, multi))
		for _, row := range llm {
			l := row.LLM
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %.0f | %s | %s | %s | %.2f | %.2f | %.1f | %s |\n",
				row.Scenario, row.impl(multi), l.Calls, optI(&l.Rejected, 0), optI(&l.RejectedAfterWarmup, 0), l.TokensPerInterval,
				optF(row.Utilization, func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }),
				optI(&l.MaxTokens, l.TokenLimit), optI(&l.MaxRequests, l.RequestLimit),
				row.RoundTripsPerAdm, row.CommandsPerAdm, row.RedisCPUUsPerAdm,
				optF(row.Jain, func(v float64) string { return fmt.Sprintf("%.3f", v) }))
		}
		b.WriteString("\n")
	}
	if len(inflight) > 0 {
		b.WriteString(runCols("| inflight (peers: no cross-process cap) | calls/s | cap | max in flight | mean in flight / cap | refused over cap | RT/adm | reservations/adm | cmds/adm | lease waits/adm | Redis CPU µs/adm | wait p50 | wait p99 |\n",
			"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", 0, multi))
		for _, row := range inflight {
			f := row.InFlight
			maxCell := fmt.Sprint(f.Max)
			if f.Max > f.Cap {
				maxCell = "**" + maxCell + "**"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %.1f%% | %s | %.2f | %.2f | %.2f | %.2f | %.1f | %s | %s |\n",
				row.impl(multi), fmtRate(row.AdmittedPerSec), f.Cap, maxCell, 100*f.Utilization, optI(&f.OverCap, 0),
				row.RoundTripsPerAdm, f.ReservationsPerAdm, row.CommandsPerAdm, f.LeaseWaitsPerAdm, row.RedisCPUUsPerAdm,
				fmtMs(row.WaitP50Ms), fmtMs(row.WaitP99Ms))
		}
		b.WriteString("\n")
	}
	if len(storm) > 0 {
		writeStorm(&b, storm, multi)
	}
	if len(prio) > 0 {
		writePriority(&b, prio, multi)
	}
	if len(tenants) > 0 {
		writeTenants(&b, tenants, multi)
		writeTenantTargets(&b, r.TenantTargets, multi)
	}
	if len(far) > 0 {
		writeFar(&b, far, multi)
	}
	if len(faults) > 0 {
		writeFaults(&b, faults, multi)
	}
	writeStats(&b, slices.Concat(far, faults, tenants), multi)
	if multi {
		writeSummary(&b, r.Summary)
	}
	writeAttrib(&b, r.Rows, multi)
	if len(r.Latency) > 0 {
		b.WriteString("| latency (unthrottled, 1 goroutine) | PING p50 | PING p99 | Wait p50 | Wait p99 | Wait/PING p50 |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|\n")
		for _, l := range r.Latency {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.2f |\n", runLabel(l.Impl, l.Run, multi),
				fmtMs(l.PingP50Us/1000), fmtMs(l.PingP99Us/1000), fmtMs(l.WaitP50Us/1000), fmtMs(l.WaitP99Us/1000), l.RatioP50)
		}
		b.WriteString("\n")
	}
	if len(r.Memory) > 0 {
		b.WriteString("| memory (one window) | calls | members | MEMORY USAGE | bytes/member | at rest: after | members | MEMORY USAGE |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, m := range r.Memory {
			rest := "| - | - | -"
			if m.RestSeconds > 0 {
				rest = fmt.Sprintf("| %.0fs | %d | %d", m.RestSeconds, m.RestMembers, m.RestBytes)
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %.1f %s |\n", runLabel(m.Impl, m.Run, multi), m.Calls, m.Members, m.Bytes, m.BytesPerMember, rest)
		}
		b.WriteString("\n")
	}
	if len(r.Keys) > 0 {
		b.WriteString("| memory (many keys) | keys | calls per key | bytes/key after one call | after all | MEMORY USAGE of one key |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|\n")
		for _, k := range r.Keys {
			fmt.Fprintf(&b, "| %s | %d | %d | %.0f | %.0f | %d |\n", runLabel(k.Impl, k.Run, multi), k.Keys, k.Calls, k.BytesFirst, k.BytesAll, k.UsageAll)
		}
		b.WriteString("\n")
	}
	b.WriteString("Scenarios:\n\n")
	for _, s := range r.Scenarios {
		fmt.Fprintf(&b, "- %s\n", s.Description)
	}
	var notes []string
	for _, row := range r.Rows {
		if row.Errors > 0 || row.APIErrors > 0 {
			notes = append(notes, fmt.Sprintf("- %s/%s: %d wait errors, %d API errors (first: %s)",
				row.Scenario, runLabel(row.Impl, row.Run, multi), row.Errors, row.APIErrors, row.FirstError))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\nErrors:\n\n" + strings.Join(notes, "\n") + "\n")
	}
	return b.String()
}

// writeStorm writes the table of KindStorm rows.
func writeStorm(b *strings.Builder, rows []Row, multi bool) {
	b.WriteString(runCols("| storm | impl | Wait calls | failed | RT/Wait | admissions | cmds/adm | utilization | max in window | strict rejects | Redis CPU µs/adm | wait p50 | wait p99 | failed early | failed returned at, % of deadline: p50 | p99 |\n",
		"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", 1, multi))
	for _, row := range rows {
		f := row.Storm
		p50, p99 := "—", "—" // no Wait succeeded after the warm-up
		if row.Measured > 0 {
			p50, p99 = fmtMs(row.WaitP50Ms), fmtMs(row.WaitP99Ms)
		}
		fmt.Fprintf(b, "| %s | %s | %d | %d | %.3f | %d | %.2f | %s | %s | %s | %.1f | %s | %s | %.1f%% | %s | %s |\n",
			row.Scenario, row.impl(multi), f.WaitCalls, f.Failed, f.RoundTripsPerWait, f.Admitted, row.CommandsPerAdm,
			optF(row.Utilization, func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }),
			optI(row.MaxInWindow, row.Limit), optI(row.StrictRejects, 0), row.RedisCPUUsPerAdm,
			p50, p99, 100*f.EarlyShare, fmtDeadline(f.FailedAtP50), fmtDeadline(f.FailedAtP99))
	}
	b.WriteString("\n")
}

// writePriority writes the table of KindPriority rows.
func writePriority(b *strings.Builder, rows []Row, multi bool) {
	b.WriteString(runCols("| priority | impl | low share | low Throttler | high arrived | high admitted | high wait p50 | p99 | max | low admitted | low/s | utilization | max in window | strict rejects | RT/adm | cmds/adm | Redis CPU µs/adm |\n",
		"|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", 1, multi))
	for _, row := range rows {
		f := row.Priority
		fmt.Fprintf(b, "| %s | %s | %.2f | %s | %d | %d | %s | %s | %s | %d | %s | %s | %s | %s | %.2f | %.2f | %.1f |\n",
			row.Scenario, row.impl(multi), f.LowShare, f.lowThrottler(), f.HighArrived, f.HighAdmitted,
			fmtMs(f.HighP50Ms), fmtMs(f.HighP99Ms), fmtMs(f.HighMaxMs), f.LowAdmitted, fmtRate(f.LowPerSec),
			optF(row.Utilization, func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }),
			optI(row.MaxInWindow, row.Limit), optI(row.StrictRejects, 0),
			row.RoundTripsPerAdm, row.CommandsPerAdm, row.RedisCPUUsPerAdm)
	}
	b.WriteString("\n")
}

// lowThrottler says which Throttler the low-priority calls waited on.
func (f *PriorityRow) lowThrottler() string {
	if f.LowAheadMs == nil {
		return "the same"
	}
	return "own, ahead " + fmtMs(*f.LowAheadMs)
}

// fmtDeadline formats a time as a share of a deadline, in percent.
func fmtDeadline(v float64) string { return fmt.Sprintf("%.3g%%", 100*v) }

// summary is the row in one line, for progress output.
func (row Row) summary() string {
	s := fmt.Sprintf("%s/s", fmtRate(row.AdmittedPerSec))
	if row.LLM != nil {
		s = fmt.Sprintf("%d calls, %d 429s (%d after warm-up), tokens %.1f%% of the limit, max in window %d/%d tokens, %d/%d requests, %.2f RT/call",
			row.LLM.Calls, row.LLM.Rejected, row.LLM.RejectedAfterWarmup, 100*deref(row.Utilization),
			row.LLM.MaxTokens, row.LLM.TokenLimit, row.LLM.MaxRequests, row.LLM.RequestLimit, row.RoundTripsPerAdm)
		if row.Errors+row.APIErrors > 0 {
			s += fmt.Sprintf(", %d errors (%s)", row.Errors+row.APIErrors, row.FirstError)
		}
		return s
	}
	if f := row.Storm; f != nil {
		s += fmt.Sprintf(", %d Waits (%d failed, %.1f%% of those early), %.3f RT/Wait, %.2f cmds/adm",
			f.WaitCalls, f.Failed, 100*f.EarlyShare, f.RoundTripsPerWait, row.CommandsPerAdm)
	}
	if f := row.Priority; f != nil {
		s += fmt.Sprintf(", low share %.2f (%s Throttler), high: %d arrived, %d admitted, wait p50 %s p99 %s max %s; low: %d admitted (%s/s)",
			f.LowShare, f.lowThrottler(), f.HighArrived, f.HighAdmitted, fmtMs(f.HighP50Ms), fmtMs(f.HighP99Ms), fmtMs(f.HighMaxMs),
			f.LowAdmitted, fmtRate(f.LowPerSec))
	}
	if f := row.Tenants; f != nil {
		s += f.summary()
	}
	if f := row.Far; f != nil {
		s += fmt.Sprintf(", %d 429s at the API, utilization %.1f%% (after 2 windows %.1f%%), admissions in Redis max %d in a window",
			f.Refused, 100*f.UtilRun, 100*f.UtilAfter, f.AdmissionsMax)
	}
	if f := row.Fault; f != nil {
		s += fmt.Sprintf(", %d Wait errors (%d deadline, %d Redis timeout, %d other), shares", f.WaitErrors, f.Deadline, f.RedisTimeout, f.Other)
		for _, sh := range f.Shares {
			s += fmt.Sprintf(" %.1f%%", 100*sh)
		}
	}
	if f := row.InFlight; f != nil {
		s += fmt.Sprintf(", in flight max %d/%d mean %.1f%% of the cap, %d refused over it", f.Max, f.Cap, 100*f.Utilization, f.OverCap)
	}
	if row.MaxInWindow != nil {
		s += fmt.Sprintf(", max in window %d/%d, strict rejects %d", *row.MaxInWindow, row.Limit, *row.StrictRejects)
	}
	s += fmt.Sprintf(", %.2f RT/adm, wait p50 %s p99 %s", row.RoundTripsPerAdm, fmtMs(row.WaitP50Ms), fmtMs(row.WaitP99Ms))
	if row.Errors+row.APIErrors > 0 {
		s += fmt.Sprintf(", %d errors (%s)", row.Errors+row.APIErrors, row.FirstError)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

func deref(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func us(ns int64) float64 { return float64(ns) / 1000 }

func slicesSort(s []int64) { slices.Sort(s) }

func optF(v *float64, f func(float64) string) string {
	if v == nil {
		return "—"
	}
	return f(*v)
}

// optI formats an optional count, in bold when it is over the bound given
// (bound 0: any non-zero value).
func optI(v *int, bound int) string {
	if v == nil {
		return "—"
	}
	if *v > bound {
		return fmt.Sprintf("**%d**", *v)
	}
	return fmt.Sprintf("%d", *v)
}

func fmtRate(r float64) string {
	if r >= 1000 {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%.1f", r)
}

// fmtMs formats milliseconds with a unit that suits them.
func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 0.001:
		return fmt.Sprintf("%.0fns", v*1e6)
	case v < 1:
		return fmt.Sprintf("%.0fµs", v*1000)
	case v < 10:
		return fmt.Sprintf("%.2fms", v)
	case v < 1000:
		return fmt.Sprintf("%.0fms", v)
	}
	return fmt.Sprintf("%.2fs", v/1000)
}
