package sim

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// TenantCall is one call of a tenant: the process that made it, when its
// caller began to wait and when the call returned, its units, and whether
// it was admitted (then End is its admission).
type TenantCall struct {
	Replica    int
	Tenant     string
	Start, End time.Duration
	N          int
	Admitted   bool
}

// TenantLog keeps a run's calls of tenants. It is safe for concurrent use.
type TenantLog struct {
	mu    sync.Mutex
	calls []TenantCall
}

// Add records a call that returned.
func (l *TenantLog) Add(c TenantCall) {
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

// Calls returns the calls recorded, by start.
func (l *TenantLog) Calls() []TenantCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.calls)
	slices.SortStableFunc(out, func(a, b TenantCall) int { return int(a.Start - b.Start) })
	return out
}

// Span is a stretch of virtual time, [From, To).
type Span struct{ From, To time.Duration }

func (s Span) String() string { return fmt.Sprintf("[%s, %s)", fmtDur(s.From), fmtDur(s.To)) }

// covered reports whether spans (sorted by From, merged or not) cover s.
func covered(spans []Span, s Span) bool {
	at := s.From
	for _, c := range spans {
		if c.From > at {
			break
		}
		at = max(at, c.To)
		if at >= s.To {
			return true
		}
	}
	return at >= s.To
}

// backlog returns, for each tenant, the spans during which it had at
// least two calls waiting in one process (behind one of its own there:
// backlogged as the library's tenants.go tells it), sorted by From; and
// the most calls each had waiting at once in the whole fleet.
func backlog(calls []TenantCall) (spans map[string][]Span, most map[string]int) {
	type edge struct {
		at time.Duration
		d  int
	}
	type key struct {
		replica int
		tenant  string
	}
	per, fleet := map[key][]edge{}, map[string][]edge{}
	for _, c := range calls {
		k := key{c.Replica, c.Tenant}
		per[k] = append(per[k], edge{c.Start, 1}, edge{c.End, -1})
		fleet[c.Tenant] = append(fleet[c.Tenant], edge{c.Start, 1}, edge{c.End, -1})
	}
	// Ends before starts at the same instant: a call admitted as the next
	// one begins does not wait with it.
	order := func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.d - b.d
	}
	spans, most = map[string][]Span{}, map[string]int{}
	for k, es := range per {
		slices.SortFunc(es, order)
		n, from := 0, time.Duration(0)
		for _, e := range es {
			if n += e.d; n == 2 && e.d > 0 {
				from = e.at
			} else if n == 1 && e.d < 0 && e.at > from {
				spans[k.tenant] = append(spans[k.tenant], Span{from, e.at})
			}
		}
	}
	for t, es := range fleet {
		slices.SortFunc(es, order)
		n := 0
		for _, e := range es {
			n += e.d
			most[t] = max(most[t], n)
		}
	}
	for t := range spans {
		slices.SortFunc(spans[t], func(a, b Span) int { return int(a.From - b.From) })
	}
	return spans, most
}

// LightMost is the most calls a light tenant has waiting at once, in the
// whole fleet: "a couple".
const LightMost = 2

// ShareCheck judges the tenants' shares of a run.
type ShareCheck struct {
	Weight func(tenant string) float64 // each tenant's weight
	// Fraction of its weighted fair share a backlogged tenant must get in
	// a stretch, less Slack units.
	Fraction float64
	Slack    int
	// Settle is how long before a stretch a tenant must have been
	// backlogged already to be judged in it: the time its cap takes to be
	// learned and the claims it made before to leave.
	Settle time.Duration
	// LightWait is the longest a light tenant's call may wait (0: not
	// checked).
	LightWait time.Duration
}

// Share is one tenant's part of a stretch.
type Share struct {
	Tenant     string
	Units      int     // admitted in the stretch
	Fair       float64 // its weighted share of what the light and the intermittent left (backlogged tenants only)
	Backlogged bool    // backlogged (see backlog) from Settle before the stretch to its end
	Light      bool    // never more than LightMost calls waiting at once in the run
}

// Shares is the share check's reading of one stretch.
type Shares struct {
	Span   Span
	Shares []Share
}

func (s Shares) String() string {
	var b strings.Builder
	total := 0
	for _, sh := range s.Shares {
		total += sh.Units
	}
	fmt.Fprintf(&b, "%s: %d units:", s.Span, total)
	for _, sh := range s.Shares {
		what := "intermittent"
		switch {
		case sh.Backlogged:
			what = fmt.Sprintf("backlogged, fair %.1f", sh.Fair)
		case sh.Light:
			what = "light"
		}
		fmt.Fprintf(&b, " %s=%d (%s)", sh.Tenant, sh.Units, what)
	}
	return b.String()
}

// Judge reads the shares of each stretch and returns what breaks the
// check: in a stretch where two or more tenants are backlogged, one that
// got less than Fraction of its fair share, less Slack (its share by
// weight among the backlogged tenants of what the others did not take:
// the others got what they asked, or more); and a light tenant's call
// that failed or waited longer than LightWait, when the call began in a
// stretch.
func (c ShareCheck) Judge(calls []TenantCall, stretches []Span) (read []Shares, broken []string) {
	spans, most := backlog(calls)
	tenants := make([]string, 0, len(most))
	for t := range most {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	for _, st := range stretches {
		sh := Shares{Span: st}
		var pool, weights float64
		for _, t := range tenants {
			s := Share{Tenant: t, Light: most[t] <= LightMost,
				Backlogged: covered(spans[t], Span{st.From - c.Settle, st.To})}
			for _, cl := range calls {
				if cl.Tenant == t && cl.Admitted && cl.End >= st.From && cl.End < st.To {
					s.Units += cl.N
				}
			}
			pool += float64(s.Units)
			if s.Backlogged {
				weights += c.Weight(t)
			}
			sh.Shares = append(sh.Shares, s)
		}
		backlogged := 0
		for i := range sh.Shares {
			if s := &sh.Shares[i]; !s.Backlogged {
				pool -= float64(s.Units)
			} else {
				backlogged++
			}
		}
		for i := range sh.Shares {
			s := &sh.Shares[i]
			if !s.Backlogged {
				continue
			}
			s.Fair = pool * c.Weight(s.Tenant) / weights
			if backlogged >= 2 && float64(s.Units) < c.Fraction*s.Fair-float64(c.Slack) {
				broken = append(broken, fmt.Sprintf("tenant %s, backlogged, got %d units in %s, less than %.2f of its fair share %.1f (less %d): %s",
					s.Tenant, s.Units, st, c.Fraction, s.Fair, c.Slack, sh))
			}
		}
		read = append(read, sh)
	}
	return read, append(broken, c.lightBroken(calls, stretches, most)...)
}

// lightBroken returns the calls of light tenants begun in a stretch that
// failed or waited longer than LightWait.
func (c ShareCheck) lightBroken(calls []TenantCall, stretches []Span, most map[string]int) []string {
	var broken []string
	for _, cl := range calls {
		if most[cl.Tenant] > LightMost || !slices.ContainsFunc(stretches, func(s Span) bool { return cl.Start >= s.From && cl.Start < s.To }) {
			continue
		}
		switch waited := cl.End - cl.Start; {
		case !cl.Admitted:
			broken = append(broken, fmt.Sprintf("light tenant %s: r%d's call of %d begun at %s not admitted", cl.Tenant, cl.Replica, cl.N, fmtDur(cl.Start)))
		case c.LightWait > 0 && waited > c.LightWait:
			broken = append(broken, fmt.Sprintf("light tenant %s: r%d's call of %d begun at %s waited %s, more than %s",
				cl.Tenant, cl.Replica, cl.N, fmtDur(cl.Start), fmtDur(waited), fmtDur(c.LightWait)))
		}
	}
	return broken
}

// Totals returns each tenant's admitted units over the whole run, as
// "name=units" by name.
func Totals(calls []TenantCall) string {
	units := map[string]int{}
	for _, c := range calls {
		if c.Admitted {
			units[c.Tenant] += c.N
		} else if _, ok := units[c.Tenant]; !ok {
			units[c.Tenant] = 0
		}
	}
	names := make([]string, 0, len(units))
	for t := range units {
		names = append(names, t)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, t := range names {
		parts[i] = fmt.Sprintf("%s=%d", t, units[t])
	}
	return strings.Join(parts, " ")
}

// Stretches returns the stretches of a run whose tenants' shares may be
// judged: the spans between the times tenants come and go (From and To),
// each less settle at its start, from no earlier than from, that last at
// least least.
func (s Scenario) Stretches(from, settle, least time.Duration) []Span {
	cuts := []time.Duration{0, s.Run}
	for _, t := range s.Tenants {
		cuts = append(cuts, t.From, t.To)
	}
	cuts = slices.DeleteFunc(cuts, func(d time.Duration) bool { return d <= 0 || d > s.Run })
	cuts = append(cuts, 0)
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var out []Span
	for i := 1; i < len(cuts); i++ {
		sp := Span{max(cuts[i-1]+settle, from), cuts[i]}
		if sp.To-sp.From >= least {
			out = append(out, sp)
		}
	}
	return out
}

// LightSwing is how far the light tenants' calls (see LightMost) swing
// above their mean in a window of length w: the most units they were
// admitted in one window (t-w, t], less the units a window held on
// average while they came. The caps leave the backlogged tenants what the
// light ones held at their most lately (see the library's tenants.go),
// so a calm run may leave that much of a window unused while the light
// tenants hold less (seed 580: calls of up to 82 units).
func LightSwing(calls []TenantCall, w time.Duration) int {
	_, most := backlog(calls)
	var at []time.Duration
	var units []int
	for _, c := range calls {
		if c.Admitted && most[c.Tenant] <= LightMost {
			at, units = append(at, c.End), append(units, c.N)
		}
	}
	if len(at) == 0 || w <= 0 {
		return 0
	}
	idx := make([]int, len(at))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return int(at[a] - at[b]) })
	peak, held, total, lo := 0, 0, 0, 0
	for _, i := range idx {
		held += units[i]
		total += units[i]
		for at[idx[lo]] <= at[i]-w {
			held -= units[idx[lo]]
			lo++
		}
		peak = max(peak, held)
	}
	span := at[idx[len(idx)-1]] - at[idx[0]] + w
	return max(0, peak-int(float64(total)*float64(w)/float64(span)))
}
