package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Tenant is one tenant of a scenario's calls (ContextWithTenant). The
// steady tenants are the replicas' own callers' (Scenario.Goroutines on
// each): each caller calls for one of the steady tenants on its replica,
// in turn by caller number, and for the first tenant while its own is
// away (before From, from To on: a tenant that joins late or leaves
// early, with the callers' demand unchanged). A flood and a light tenant
// have callers of their own, added to the replicas': a flood's callers
// call back to back from From to To, a light tenant's one caller on each
// of its replicas pauses up to Pace between calls.
type Tenant struct {
	Name     string
	Weight   float64 // WithTenantWeight's weight (0: the seed sets no weights)
	On       []int   // the replicas its callers are on
	Callers  int     // a flood's or light tenant's callers on each of On (0: a steady tenant)
	From, To time.Duration
	Flood    bool
	Pace     time.Duration // a light tenant's caller pauses up to twice this between calls
}

// Steady reports a tenant of the replicas' own callers.
func (t Tenant) Steady() bool { return t.Callers == 0 }

func (t Tenant) String() string {
	s := t.Name
	switch {
	case t.Flood:
		s += fmt.Sprintf(" (flood of %d callers", t.Callers)
	case !t.Steady():
		s += fmt.Sprintf(" (light, %d caller pausing up to %s", t.Callers, fmtDur(2*t.Pace))
	default:
		s += " (steady"
	}
	s += fmt.Sprintf(" on r%v", t.On)
	if t.From > 0 {
		s += " from " + fmtDur(t.From)
	}
	if t.To > 0 {
		s += " to " + fmtDur(t.To)
	}
	if t.Weight > 0 {
		s += fmt.Sprintf(", weight %g", t.Weight)
	}
	return s + ")"
}

// drawTenants draws the tenants of a third of the seeds (two thirds of
// the calm ones, a quarter of the others), from a source of its own, so that every other draw of every seed stays what it was: two
// to four steady tenants, the first on every replica and the others on
// some (skew), one of which may join late or leave early; on half of
// those seeds a flood that starts and stops (or runs from the start, or
// to the end), on half a light tenant; on half, weights.
func drawTenants(seed uint64, s Scenario) []Tenant {
	r := rand.New(rand.NewPCG(seed, 0x74656e616e74))
	// Two thirds of the calm seeds, whose shares the simulation judges,
	// and a quarter of the others: a third of all.
	if x := r.IntN(12); s.Calm() && x >= 8 || !s.Calm() && x >= 3 {
		return nil
	}
	weighted := r.IntN(2) == 0
	weight := func() float64 {
		if !weighted {
			return 0
		}
		return pick(r, 0.5, 1, 1, 2, 3)
	}
	var out []Tenant
	for i := range 2 + r.IntN(3) {
		t := Tenant{Name: fmt.Sprintf("t%d", i), Weight: weight(), On: someReplicas(r, s.Replicas, i == 0)}
		out = append(out, t)
	}
	if r.IntN(2) == 0 {
		// One steady tenant (not the first) joins late, leaves early, or
		// both.
		t := &out[1+r.IntN(len(out)-1)]
		switch r.IntN(3) {
		case 0:
			t.From = time.Duration(float64(s.Run) * (0.2 + 0.3*r.Float64()))
		case 1:
			t.To = time.Duration(float64(s.Run) * (0.5 + 0.4*r.Float64()))
		default:
			t.From = time.Duration(float64(s.Run) * (0.1 + 0.2*r.Float64()))
			t.To = time.Duration(float64(s.Run) * (0.6 + 0.3*r.Float64()))
		}
	}
	if r.IntN(2) == 0 {
		f := Tenant{Name: "flood", Flood: true, Weight: weight(), On: someReplicas(r, s.Replicas, false)}
		f.Callers = max(1, min(3+r.IntN(28), 120/len(f.On)))
		switch r.IntN(3) {
		case 0: // from the start, stops
			f.To = time.Duration(float64(s.Run) * (0.5 + 0.4*r.Float64()))
		case 1: // starts, runs to the end
			f.From = time.Duration(float64(s.Run) * (0.1 + 0.3*r.Float64()))
		default: // starts and stops
			f.From = time.Duration(float64(s.Run) * (0.1 + 0.2*r.Float64()))
			f.To = time.Duration(float64(s.Run) * (0.6 + 0.3*r.Float64()))
		}
		out = append(out, f)
	}
	if r.IntN(2) == 0 {
		l := Tenant{Name: "light", Weight: weight(), On: []int{r.IntN(s.Replicas)}, Callers: 1}
		if s.Replicas > 1 && r.IntN(2) == 0 {
			l.On = append(l.On, (l.On[0]+1+r.IntN(s.Replicas-1))%s.Replicas)
			slices.Sort(l.On)
		}
		// A twentieth of the limit from each caller, or less.
		l.Pace = max(time.Millisecond, min(s.Run/4, 20*s.W()/time.Duration(s.Limits[0].Limit)))
		out = append(out, l)
	}
	return out
}

// someReplicas draws the replicas a tenant is on: every one, or each with
// a chance of a third or two thirds (at least one).
func someReplicas(r *rand.Rand, replicas int, all bool) []int {
	p := pick(r, 1, 1.0/3, 2.0/3)
	var on []int
	for i := range replicas {
		if all || r.Float64() < p {
			on = append(on, i)
		}
	}
	if len(on) == 0 {
		on = []int{r.IntN(replicas)}
	}
	return on
}

// WithoutTenants is the scenario without tenants: as Generate drew it
// before they existed.
func (s Scenario) WithoutTenants() Scenario {
	s.Tenants = nil
	return s
}

// TenantOf is the tenant a steady caller, caller g of replica (its
// machine, whichever process runs there), calls for at at: the steady
// tenants on the replica in turn by caller number, the first one for a
// tenant away at at. "" without tenants.
func (s Scenario) TenantOf(replica, g int, at time.Duration) string {
	var here []Tenant
	for _, t := range s.Tenants {
		if t.Steady() && slices.Contains(t.On, replica) {
			here = append(here, t)
		}
	}
	if len(here) == 0 {
		return ""
	}
	t := here[(g+replica)%len(here)]
	if at < t.From || t.To > 0 && at >= t.To {
		return s.Tenants[0].Name
	}
	return t.Name
}

// TenantWeight is the weight the scenario gives tenant (1 when it gives
// none), as WithTenantWeight is told.
func (s Scenario) TenantWeight(tenant string) float64 {
	for _, t := range s.Tenants {
		if t.Name == tenant && t.Weight > 0 {
			return t.Weight
		}
	}
	return 1
}

// Weighted reports a scenario that sets the tenants' weights.
func (s Scenario) Weighted() bool {
	return slices.ContainsFunc(s.Tenants, func(t Tenant) bool { return t.Weight > 0 })
}

// tenantString describes the tenants for Scenario.String.
func (s Scenario) tenantString() string {
	if len(s.Tenants) == 0 {
		return ""
	}
	parts := make([]string, len(s.Tenants))
	for i, t := range s.Tenants {
		parts[i] = t.String()
	}
	return "; tenants " + strings.Join(parts, ", ")
}
