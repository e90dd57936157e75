package harness

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SummaryRow sums up the runs of one scenario with one implementation
// (-runs), for the rows that have a max in window (those that call the
// API).
type SummaryRow struct {
	Scenario string `json:"scenario"`
	Impl     string `json:"impl"`
	Runs     int    `json:"runs"`
	// RunsOver lists the runs (1, 2, ...) with a window over the limit at
	// the API; MaxInWindow and StrictRejects are each run's, in order.
	RunsOver      []int `json:"runs_over"`
	MaxInWindow   []int `json:"max_in_window"`
	StrictRejects []int `json:"strict_rejects"`
	// The least and the most of each figure over the runs.
	AdmittedPerSec   Range  `json:"admitted_per_sec"`
	Utilization      Range  `json:"utilization"`
	RoundTripsPerAdm Range  `json:"round_trips_per_admission"`
	CommandsPerAdm   Range  `json:"commands_per_admission"`
	Jain             *Range `json:"jain,omitempty"`
	WaitP50Ms        Range  `json:"wait_p50_ms"`
	WaitP99Ms        Range  `json:"wait_p99_ms"`
	// Margin is the least and most of the runs' tightest margins
	// (AttribRow.Tightest: how near a run came to a window over the
	// limit; negative, it had one), and MarginRun the run of the least.
	Margin    *Range `json:"tightest_margin_ms,omitempty"`
	MarginRun int    `json:"tightest_margin_run,omitempty"`
}

// Range is the least and the most of a figure over runs.
type Range struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

func (r *Range) add(v float64, first bool) {
	if first {
		r.Min, r.Max = v, v
		return
	}
	r.Min, r.Max = min(r.Min, v), max(r.Max, v)
}

// summarize sums up rows (in run order) by scenario and implementation,
// for those with a max in window.
func summarize(rows []Row) []SummaryRow {
	var out []SummaryRow
	at := map[[2]string]int{}
	for _, row := range rows {
		if row.MaxInWindow == nil {
			continue
		}
		k := [2]string{row.Scenario, row.Impl}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, SummaryRow{Scenario: row.Scenario, Impl: row.Impl})
		}
		s := &out[i]
		first := s.Runs == 0
		s.Runs++
		s.MaxInWindow = append(s.MaxInWindow, *row.MaxInWindow)
		s.StrictRejects = append(s.StrictRejects, *row.StrictRejects)
		if *row.MaxInWindow > row.Limit {
			s.RunsOver = append(s.RunsOver, row.Run)
		}
		s.AdmittedPerSec.add(row.AdmittedPerSec, first)
		s.Utilization.add(deref(row.Utilization), first)
		s.RoundTripsPerAdm.add(row.RoundTripsPerAdm, first)
		s.CommandsPerAdm.add(row.CommandsPerAdm, first)
		if row.Jain != nil {
			if s.Jain == nil {
				s.Jain = &Range{}
				s.Jain.add(*row.Jain, true)
			} else {
				s.Jain.add(*row.Jain, false)
			}
		}
		s.WaitP50Ms.add(row.WaitP50Ms, first)
		s.WaitP99Ms.add(row.WaitP99Ms, first)
		if row.Attrib != nil && row.Attrib.Tightest != nil {
			m := row.Attrib.Tightest.MarginMs
			if s.Margin == nil {
				s.Margin = &Range{Min: m, Max: m}
				s.MarginRun = row.Run
			} else if s.Margin.add(m, false); m == s.Margin.Min {
				s.MarginRun = row.Run
			}
		}
	}
	return out
}

// writeSummary writes the summary across runs.
func writeSummary(b *strings.Builder, rows []SummaryRow) {
	if len(rows) == 0 {
		return
	}
	b.WriteString("| across runs | impl | runs | runs over the limit | max in window, each run | strict rejects, each run | tightest margin | admitted/s | utilization | RT/adm | cmds/adm | Jain | wait p50 | wait p99 |\n")
	b.WriteString("|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	pct := func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
	f2 := func(v float64) string { return fmt.Sprintf("%.2f", v) }
	f3 := func(v float64) string { return fmt.Sprintf("%.3f", v) }
	for _, s := range rows {
		over := fmt.Sprint(len(s.RunsOver))
		if len(s.RunsOver) > 0 {
			over = fmt.Sprintf("**%d** (run %s)", len(s.RunsOver), joinInts(s.RunsOver))
		}
		jain := "—"
		if s.Jain != nil {
			jain = s.Jain.format(f3)
		}
		margin := "—"
		if s.Margin != nil {
			margin = fmt.Sprintf("%+.1fms (run %d)", s.Margin.Min, s.MarginRun)
		}
		fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Scenario, s.Impl, s.Runs, over, joinInts(s.MaxInWindow), joinInts(s.StrictRejects), margin,
			s.AdmittedPerSec.format(fmtRate), s.Utilization.format(pct), s.RoundTripsPerAdm.format(f2),
			s.CommandsPerAdm.format(f2), jain, s.WaitP50Ms.format(fmtMs), s.WaitP99Ms.format(fmtMs))
	}
	b.WriteString("\n")
}

// format writes the range with f: one value when it is all one.
func (r Range) format(f func(float64) string) string {
	lo, hi := f(r.Min), f(r.Max)
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// grouped returns the rows grouped by scenario (in the report's order),
// then implementation (in the scenario's order), each group in run order.
func (r *Report) grouped() []Row {
	pos := func(row Row) (int, int) {
		for i, s := range r.Scenarios {
			if s.Name == row.Scenario {
				return i, slices.Index(s.Impls, row.Impl)
			}
		}
		return len(r.Scenarios), 0
	}
	rows := slices.Clone(r.Rows)
	slices.SortStableFunc(rows, func(a, b Row) int {
		as, ai := pos(a)
		bs, bi := pos(b)
		if as != bs {
			return as - bs
		}
		return ai - bi
	})
	return rows
}

// runCols returns a table's header and separator lines, with a run column
// after column at (0: the first) when multi.
func runCols(header, sep string, at int, multi bool) string {
	if !multi {
		return header + sep
	}
	return insertCell(header, at, " run |") + insertCell(sep, at, "---:|")
}

// insertCell inserts cell after column at of a Markdown table line.
func insertCell(line string, at int, cell string) string {
	n := -1
	for i, c := range line {
		if c == '|' {
			if n++; n == at+1 {
				return line[:i+1] + cell + line[i+1:]
			}
		}
	}
	return line
}

// impl is the row's implementation cell, followed by its run's cell when
// multi.
func (row Row) impl(multi bool) string {
	if !multi {
		return row.Impl
	}
	return fmt.Sprintf("%s | %d", row.Impl, row.Run)
}

// runLabel names an implementation and, when multi, its run, in one cell.
func runLabel(impl string, run int, multi bool) string {
	if !multi {
		return impl
	}
	return fmt.Sprintf("%s (run %d)", impl, run)
}
