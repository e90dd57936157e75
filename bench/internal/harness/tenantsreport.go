package harness

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-throttler/throttler/bench/internal/fakeapi"
	"github.com/go-throttler/throttler/bench/internal/metrics"
)

// TenantsRow is what a KindTenants run measures besides a Row's figures
// (which count every tenant's calls).
type TenantsRow struct {
	Untagged bool    `json:"untagged"` // the calls went without their tenant
	PeriodS  float64 `json:"period_s"` // the length of the periods shares are counted in
	// Periods is how many periods after the warm-up the shares are
	// counted in (one shorter period when the run holds no whole one).
	Periods int             `json:"periods"`
	Tenants []TenantFigures `json:"tenants"`
	// ShareGap is the largest gap, in any period, between a flooding
	// tenant's share of the calls at the API and its target; nil when
	// fewer than two tenants flood.
	ShareGap *float64 `json:"share_gap,omitempty"`
	// Churn: Redis's memory as tenants came and went (see churn.go).
	Churn *ChurnFigures `json:"churn,omitempty"`
}

// TenantFigures is one tenant's calls in a KindTenants run.
type TenantFigures struct {
	Name       string  `json:"name"`
	Weight     float64 `json:"weight"` // 1 when none was given
	Replicas   int     `json:"replicas"`
	Goroutines int     `json:"goroutines,omitempty"` // per replica, closed loop
	Rate       float64 `json:"rate,omitempty"`       // calls a second per replica, open loop
	// Made, Admitted, Errors and Unfinished: its Waits begun, succeeded,
	// failed and still waiting at the end (an open-loop call: an interval
	// after it), whole run, all replicas.
	Made       int64 `json:"made"`
	Admitted   int64 `json:"admitted"`
	Errors     int64 `json:"errors"`
	Unfinished int   `json:"unfinished"`
	// Measured is its waits measured (see TenantResult.WaitNs), and their
	// percentiles and maximum follow.
	Measured  int     `json:"measured"`
	WaitP50Ms float64 `json:"wait_p50_ms"`
	WaitP99Ms float64 `json:"wait_p99_ms"`
	WaitMaxMs float64 `json:"wait_max_ms"`
	// PerSec is its calls at the API per second after the warm-up, and
	// Shares its share of all the calls there in each period.
	PerSec float64   `json:"per_sec"`
	Shares []float64 `json:"shares"`
	// Target is the share its weight gives it among the flooding tenants,
	// when two or more flood and it is one.
	Target *float64 `json:"target,omitempty"`
}

// tenantFigures measures each tenant of a KindTenants run: its calls from
// the replicas' counts, its shares at the API from the arrivals that name
// it.
func tenantFigures(sc Scenario, t0 time.Time, results []ReplicaResult, arrivals []fakeapi.Arrival) *TenantsRow {
	periods := sharePeriods(sc)
	f := &TenantsRow{Untagged: sc.Untagged, PeriodS: sc.Period.Seconds(), Periods: len(periods)}
	counts := make([]map[string]int, len(periods))
	for i := range counts {
		counts[i] = map[string]int{}
	}
	perTenant := map[string]int{}
	for _, a := range arrivals {
		at := a.At.Sub(t0)
		if at >= sc.Warmup && at < sc.Duration {
			perTenant[a.Tenant]++
		}
		for i, p := range periods {
			if at >= p[0] && at < p[1] {
				counts[i][a.Tenant]++
			}
		}
	}
	targets := floodTargets(sc.Tenants)
	for _, t := range sc.Tenants {
		tf := tenantOf(t, sc.Procs, results)
		tf.PerSec = float64(perTenant[t.Name]) / (sc.Duration - sc.Warmup).Seconds()
		for _, c := range counts {
			tf.Shares = append(tf.Shares, shareOf(c, t.Name))
		}
		if target, ok := targets[t.Name]; ok {
			tf.Target = ptr(target)
			for _, sh := range tf.Shares {
				f.ShareGap = ptr(max(deref(f.ShareGap), math.Abs(sh-target)))
			}
		}
		f.Tenants = append(f.Tenants, tf)
	}
	return f
}

// sharePeriods are the periods after sc's warm-up, of sc.Period each, in
// which the shares are counted (times after the start): as many whole
// ones as the run holds, or the time after the warm-up when it holds none.
func sharePeriods(sc Scenario) [][2]time.Duration {
	var out [][2]time.Duration
	for from := sc.Warmup; sc.Period > 0 && from+sc.Period <= sc.Duration; from += sc.Period {
		out = append(out, [2]time.Duration{from, from + sc.Period})
	}
	if len(out) == 0 {
		out = append(out, [2]time.Duration{sc.Warmup, sc.Duration})
	}
	return out
}

// floodTargets gives each flooding tenant its weight's share of the
// flooding tenants' weights, when two or more flood (none otherwise).
func floodTargets(loads []TenantLoad) map[string]float64 {
	var sum float64
	n := 0
	for _, t := range loads {
		if t.floods() {
			sum += t.weight()
			n++
		}
	}
	if n < 2 {
		return nil
	}
	out := map[string]float64{}
	for _, t := range loads {
		if t.floods() {
			out[t.Name] = t.weight() / sum
		}
	}
	return out
}

// shareOf is tenant's share of the calls counted in c (0 when none were).
func shareOf(c map[string]int, tenant string) float64 {
	total := 0
	for _, n := range c {
		total += n
	}
	if total == 0 {
		return 0
	}
	return float64(c[tenant]) / float64(total)
}

// tenantOf sums tenant t's calls over the replicas' results, of procs
// replicas.
func tenantOf(t TenantLoad, procs int, results []ReplicaResult) TenantFigures {
	tf := TenantFigures{Name: t.Name, Weight: t.weight(), Replicas: t.Replicas, Goroutines: t.Goroutines, Rate: t.Rate}
	if tf.Replicas == 0 {
		tf.Replicas = procs
	}
	var waits []int64
	for _, r := range results {
		for _, tr := range r.Tenants {
			if tr.Name != t.Name {
				continue
			}
			tf.Made += tr.Made
			tf.Admitted += tr.Admitted
			tf.Errors += tr.Errors
			tf.Unfinished += tr.Unfinished
			waits = append(waits, tr.WaitNs...)
		}
	}
	slicesSort(waits)
	tf.Measured = len(waits)
	tf.WaitP50Ms = ms(time.Duration(metrics.PercentileSorted(waits, 50)))
	tf.WaitP99Ms = ms(time.Duration(metrics.PercentileSorted(waits, 99)))
	if len(waits) > 0 {
		tf.WaitMaxMs = ms(time.Duration(waits[len(waits)-1]))
	}
	return tf
}

// load says what the tenant did per replica: its goroutines, or its rate.
func (tf TenantFigures) load() string {
	if tf.Rate > 0 {
		return fmt.Sprintf("%g/s open loop", tf.Rate)
	}
	return fmt.Sprintf("%d goroutines", tf.Goroutines)
}

// shares writes the tenant's shares, one per period.
func (tf TenantFigures) shares() string {
	s := make([]string, len(tf.Shares))
	for i, sh := range tf.Shares {
		s[i] = fmt.Sprintf("%.1f%%", 100*sh)
	}
	return strings.Join(s, ", ")
}

// tags says whether a run's calls carried their tenant.
func (f *TenantsRow) tags() string {
	if f.Untagged {
		return "none (plain)"
	}
	return "ContextWithTenant"
}

// writeTenants writes the tables of KindTenants rows: one line per tenant,
// then one per run with its totals.
func writeTenants(b *strings.Builder, rows []Row, multi bool) {
	b.WriteString(runCols("| tenants | impl | tenant | weight | replicas | load per replica | made | admitted | still waiting | wait p50 | p99 | max | at the API/s | share per period after the warm-up | target share |\n",
		"|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|\n", 1, multi))
	for _, row := range rows {
		for _, tf := range row.Tenants.Tenants {
			fmt.Fprintf(b, "| %s | %s | %s | %g | %d | %s | %d | %d | %d | %s | %s | %s | %s | %s | %s |\n",
				row.Scenario, row.impl(multi), tf.Name, tf.Weight, tf.Replicas, tf.load(), tf.Made, tf.Admitted, tf.Unfinished,
				fmtMs(tf.WaitP50Ms), fmtMs(tf.WaitP99Ms), fmtMs(tf.WaitMaxMs), fmtRate(tf.PerSec), tf.shares(),
				optF(tf.Target, func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }))
		}
	}
	b.WriteString("\n")
	b.WriteString(runCols("| tenants (all) | impl | tenants told | periods | utilization | max in window | strict rejects | RT/adm | cmds/adm | Redis CPU µs/adm | largest share gap |\n",
		"|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", 1, multi))
	for _, row := range rows {
		f := row.Tenants
		fmt.Fprintf(b, "| %s | %s | %s | %d x %gs | %s | %s | %s | %.2f | %.2f | %.1f | %s |\n",
			row.Scenario, row.impl(multi), f.tags(), f.Periods, f.PeriodS,
			optF(row.Utilization, func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }),
			optI(row.MaxInWindow, row.Limit), optI(row.StrictRejects, 0),
			row.RoundTripsPerAdm, row.CommandsPerAdm, row.RedisCPUUsPerAdm,
			optF(f.ShareGap, func(v float64) string { return fmt.Sprintf("%.1f pts", 100*v) }))
	}
	b.WriteString("\n")
	writeChurn(b, rows, multi)
}

// summary is a KindTenants row's tenants in one line, for
// progress output.
func (f *TenantsRow) summary() string {
	var s []string
	for _, tf := range f.Tenants {
		s = append(s, fmt.Sprintf("%s: %d/%d admitted, %s/s at the API, wait p50 %s p99 %s, shares %s",
			tf.Name, tf.Admitted, tf.Made, fmtRate(tf.PerSec), fmtMs(tf.WaitP50Ms), fmtMs(tf.WaitP99Ms), tf.shares()))
	}
	if c := f.Churn; c != nil {
		s = append(s, c.summary())
	}
	return "; " + strings.Join(s, "; ")
}

// TenantTarget is one of issue 43's targets as one run measured it: Value
// should be at most Limit.
type TenantTarget struct {
	Run      int    `json:"run"`
	Impl     string `json:"impl"`
	Scenario string `json:"scenario"`
	// Against is the scenario of the same run Value compares with ("":
	// none).
	Against string  `json:"against,omitempty"`
	What    string  `json:"what"`
	Value   float64 `json:"value"`
	Limit   float64 `json:"limit"`
	// Unit is "bytes" or "count" for a target in bytes or a count; else
	// Value and Limit are ratios ("x", with Against) or shares ("pts").
	Unit   string `json:"unit,omitempty"`
	Met    bool   `json:"met"`
	Detail string `json:"detail"`
}

// tenantTargets measures issue 43's targets on rows, each run and
// implementation on its own: the light tenants' p99 wait under the flood
// at most twice their p99 alone (tenants-flood against tenants-calm),
// each flooding tenant's share within 5 points of its weight's in every
// period (tenants-skewed, tenants-weighted), and round trips and commands
// per admission at most 1.5 times those without tenants (tenants-skewed
// against tenants-skewed-plain).
func tenantTargets(rows []Row) []TenantTarget {
	find := func(scenario, impl string, run int) *Row {
		for i := range rows {
			if r := &rows[i]; r.Scenario == scenario && r.Impl == impl && r.Run == run && r.Tenants != nil {
				return r
			}
		}
		return nil
	}
	var out []TenantTarget
	for _, row := range rows {
		f := row.Tenants
		if f == nil {
			continue
		}
		at := TenantTarget{Run: row.Run, Impl: row.Impl, Scenario: row.Scenario}
		if calm := find(tenantsCalm, row.Impl, row.Run); row.Scenario == tenantsFlood && calm != nil {
			out = append(out, lightTargets(at, f, calm)...)
		}
		if f.ShareGap != nil && !f.Untagged {
			t := at
			t.What, t.Value, t.Limit = "largest gap between a flooding tenant's share and its weight's, any period", *f.ShareGap, 0.05
			t.Detail = shareDetail(f)
			out = append(out, t)
		}
		if plain := find(tenantsPlain, row.Impl, row.Run); row.Scenario == tenantsSkewed && plain != nil {
			out = append(out, costTargets(at, &row, plain)...)
		}
		if f.Churn != nil {
			out = append(out, churnTargets(at, f.Churn)...)
		}
	}
	for i := range out {
		out[i].Met = out[i].Value <= out[i].Limit
	}
	return out
}

// lightTargets compares each light (open-loop) tenant's p99 wait in f
// with its p99 in calm.
func lightTargets(at TenantTarget, f *TenantsRow, calm *Row) []TenantTarget {
	var out []TenantTarget
	for _, tf := range f.Tenants {
		if tf.Rate == 0 {
			continue
		}
		for _, base := range calm.Tenants.Tenants {
			if base.Name != tf.Name || base.WaitP99Ms <= 0 {
				continue
			}
			t := at
			t.Against, t.What = calm.Scenario, tf.Name+"'s wait p99, over its p99 without the flood"
			t.Value, t.Limit = tf.WaitP99Ms/base.WaitP99Ms, 2
			t.Detail = fmt.Sprintf("%s against %s; %d of %d calls admitted (%d without the flood: %d)",
				fmtMs(tf.WaitP99Ms), fmtMs(base.WaitP99Ms), tf.Admitted, tf.Made, base.Made, base.Admitted)
			out = append(out, t)
		}
	}
	return out
}

// costTargets compares row's round trips and commands per admission
// with plain's, the same calls without tenants.
func costTargets(at TenantTarget, row, plain *Row) []TenantTarget {
	var out []TenantTarget
	for _, c := range []struct {
		what        string
		with, plain float64
	}{
		{"round trips per admission, over those without tenants", row.RoundTripsPerAdm, plain.RoundTripsPerAdm},
		{"Redis commands per admission, over those without tenants", row.CommandsPerAdm, plain.CommandsPerAdm},
	} {
		if c.plain <= 0 {
			continue
		}
		t := at
		t.Against, t.What, t.Value, t.Limit = plain.Scenario, c.what, c.with/c.plain, 1.5
		t.Detail = fmt.Sprintf("%.2f against %.2f", c.with, c.plain)
		out = append(out, t)
	}
	return out
}

// shareDetail lists each flooding tenant's shares against its target.
func shareDetail(f *TenantsRow) string {
	var s []string
	for _, tf := range f.Tenants {
		if tf.Target != nil {
			s = append(s, fmt.Sprintf("%s %s (target %.1f%%)", tf.Name, tf.shares(), 100**tf.Target))
		}
	}
	return strings.Join(s, "; ")
}

// writeTenantTargets writes issue 43's targets as the runs measured them.
func writeTenantTargets(b *strings.Builder, targets []TenantTarget, multi bool) {
	if len(targets) == 0 {
		return
	}
	b.WriteString(runCols("| issue 43's targets | impl | against | measured | target: at most | met | figures |\n",
		"|---|---|---|---:|---:|---|---|\n", 1, multi))
	for _, t := range targets {
		impl := t.Impl
		if multi {
			impl = fmt.Sprintf("%s | %d", t.Impl, t.Run)
		}
		value, limit := fmt.Sprintf("%.2fx", t.Value), fmt.Sprintf("%gx", t.Limit)
		switch {
		case t.Unit == "bytes":
			value, limit = fmt.Sprintf("%.0f B", t.Value), fmt.Sprintf("%.0f B", t.Limit)
		case t.Unit == "count":
			value, limit = fmt.Sprintf("%.0f", t.Value), fmt.Sprintf("%.0f", t.Limit)
		case t.Against == "":
			value, limit = fmt.Sprintf("%.1f pts", 100*t.Value), fmt.Sprintf("%g pts", 100*t.Limit)
		}
		met := "yes"
		if !t.Met {
			met = "**no**"
		}
		fmt.Fprintf(b, "| %s: %s | %s | %s | %s | %s | %s | %s |\n",
			t.Scenario, t.What, impl, orDash(t.Against), value, limit, met, t.Detail)
	}
	b.WriteString("\n")
}

// orDash is s, or "—" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
