package sim

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// World is a replica number for events that belong to no replica: faults in
// Redis, the network, the run itself.
const World = -1

// Event is one line of a run's trace.
type Event struct {
	At      time.Duration // virtual time since the run began
	Replica int           // World, or the replica it happened to
	What    string
}

func (e Event) String() string {
	who := "world"
	if e.Replica != World {
		who = fmt.Sprintf("r%d", e.Replica)
	}
	return fmt.Sprintf("%12s  %-5s %s", fmtDur(e.At), who, e.What)
}

// Admission is a call a caller was told it may make: Wait returned nil, or
// Allow said yes. At is the virtual time the caller learned it, which is
// when the call goes.
type Admission struct {
	At      time.Duration
	Replica int
	N       int  // units (WaitN's n)
	Exempt  bool // admitted by a policy the invariant documents as an exception (FailOpen while Redis fails)
	Debt    bool // the excess of a permit settled above its estimate, which windows may exceed the limit by (Permit.Settle)
	Local   bool // admitted while the replica fell back on its local share (FallbackLocal)
	Waited  time.Duration
	NoLimit bool // the caller had no deadline
	// An HTTP request the library's Transport, or a function Do called,
	// handed to the API's transport (see API): At is when it was handed
	// over, Arrive when it reached the API (one entry per write). Its
	// admission is the Transport's or Do's own: once it has a connection
	// it may give its slot back and wait for another. It is judged at
	// the API (OverfullAtAPI), not by At (Overfull).
	Sent   bool
	Arrive time.Duration
}

// Recorder keeps a run's admissions and trace. It is safe for concurrent use.
type Recorder struct {
	start time.Time

	mu     sync.Mutex
	events []Event
	adms   []Admission
}

// NewRecorder starts recording at the bubble's now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Start is the virtual time the run began.
func (r *Recorder) Start() time.Time { return r.start }

// Since is the virtual time elapsed since the run began.
func (r *Recorder) Since() time.Duration { return time.Since(r.start) }

// Note adds an event to the trace.
func (r *Recorder) Note(replica int, format string, args ...any) {
	e := Event{At: r.Since(), Replica: replica, What: fmt.Sprintf(format, args...)}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Admit records an admission (and traces it).
func (r *Recorder) Admit(a Admission) {
	a.At = r.Since()
	what := fmt.Sprintf("admitted n=%d after %s", a.N, fmtDur(a.Waited))
	if a.Exempt {
		what += " (FailOpen, Redis failing: exempt)"
	}
	if a.Debt {
		what = fmt.Sprintf("settled n=%d more than estimated (debt: exempt)", a.N)
	}
	r.mu.Lock()
	r.adms = append(r.adms, a)
	r.events = append(r.events, Event{At: a.At, Replica: a.Replica, What: what})
	r.mu.Unlock()
}

// Arrived records an HTTP request that reached the API (a.Sent, with its
// At and Arrive set), and traces it at its arrival.
func (r *Recorder) Arrived(a Admission) {
	a.Sent = true
	what := fmt.Sprintf("request reached the API, handed to the API's transport at %s", fmtDur(a.At))
	if a.Exempt {
		what += " (exempt: FailOpen while Redis failed, or blind to a lost window)"
	}
	if a.Debt {
		what += " (written off its slot, counted as debt: exempt)"
	}
	r.mu.Lock()
	r.adms = append(r.adms, a)
	r.events = append(r.events, Event{At: a.Arrive, Replica: a.Replica, What: what})
	r.mu.Unlock()
}

// Admissions returns the admissions in the order they happened.
func (r *Recorder) Admissions() []Admission {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.adms)
	slices.SortStableFunc(out, func(a, b Admission) int { return int(a.At - b.At) })
	return out
}

// Events returns the trace so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.events)
	slices.SortStableFunc(out, func(a, b Event) int { return int(a.At - b.At) })
	return out
}

// Violation is a window of length Interval, starting at From, that holds
// more than Limit admitted units.
type Violation struct {
	Key      string
	From     time.Duration
	Interval time.Duration
	Units    int
	Limit    int         // what the window may hold (the limit, plus local shares)
	Calls    []Admission // the admissions in the window (at the API, by Arrive)
	// A window of arrivals at the API (OverfullAtAPI), whose calls were
	// made (or written) OneWay before they arrived.
	AtAPI  bool
	OneWay time.Duration
}

func (v Violation) String() string {
	where := ""
	if v.AtAPI {
		where = " at the API"
	}
	return fmt.Sprintf("%s: the window [%s, %s)%s holds %d units, may hold %d",
		v.Key, fmtDur(v.From), fmtDur(v.From+v.Interval), where, v.Units, v.Limit)
}

// Overfull returns the fullest window of length interval over adms (sorted
// by At), measured against what it may hold, when it holds more: limit
// units, plus share for each replica with a Local admission in it (what
// FallbackLocal documents: a process cut off from Redis admits up to its
// share on its own). Exempt admissions and debt are skipped, and so are
// HTTP requests handed over by a Transport or Do (Sent), which are judged
// at the API (see OverfullAtAPI). Windows are half-open,
// [t, t+interval): two calls exactly interval apart never share one.
func Overfull(key string, adms []Admission, interval time.Duration, limit, share int) *Violation {
	var counted []Admission
	for _, a := range adms {
		if !a.Exempt && !a.Debt && !a.Sent {
			counted = append(counted, a)
		}
	}
	return overfull(key, counted, interval, limit, share, func(a Admission) time.Duration { return a.At })
}

// OverfullAtAPI is Overfull over the calls' arrivals at the API: a call
// made at its admission arrives oneWay after it, an HTTP request (Sent)
// at its Arrive. The same exceptions apply (exempt calls, debt, local
// shares). Every call's way to the API takes oneWay once it is made (or
// written), so a window at the API holds the calls made in the window
// oneWay earlier: the check holds the writes of HTTP requests to what
// Overfull holds admissions to. The violation's calls keep their At (when
// they were admitted or handed over); their Arrive is set.
func OverfullAtAPI(key string, adms []Admission, interval time.Duration, limit, share int, oneWay time.Duration) *Violation {
	var counted []Admission
	for _, a := range adms {
		if a.Exempt || a.Debt {
			continue
		}
		if !a.Sent {
			a.Arrive = a.At + oneWay
		}
		counted = append(counted, a)
	}
	slices.SortStableFunc(counted, func(a, b Admission) int { return int(a.Arrive - b.Arrive) })
	v := overfull(key, counted, interval, limit, share, func(a Admission) time.Duration { return a.Arrive })
	if v != nil {
		v.AtAPI, v.OneWay = true, oneWay
	}
	return v
}

// overfull is Overfull over the counted admissions, sorted by at.
func overfull(key string, counted []Admission, interval time.Duration, limit, share int, at func(Admission) time.Duration) *Violation {
	local := map[int]int{} // replica: Local admissions in the window
	worst, bestAt, bestEnd, units, j := 0, 0, 0, 0, 0
	bestUnits, bestMay := 0, 0
	for i, a := range counted {
		// The fullest window can start at an admission.
		for j < len(counted) && at(counted[j]) < at(a)+interval {
			units += counted[j].N
			if counted[j].Local {
				local[counted[j].Replica]++
			}
			j++
		}
		may := limit + share*len(local)
		// A window starts at the first of the admissions at its time
		// (the others at that time were already taken out).
		if first := i == 0 || at(counted[i-1]) < at(a); first && units-may > worst {
			worst, bestAt, bestEnd, bestUnits, bestMay = units-may, i, j, units, may
		}
		units -= a.N
		if a.Local {
			if local[a.Replica]--; local[a.Replica] == 0 {
				delete(local, a.Replica)
			}
		}
	}
	if worst <= 0 {
		return nil
	}
	return &Violation{Key: key, From: at(counted[bestAt]), Interval: interval, Units: bestUnits,
		Limit: bestMay, Calls: counted[bestAt:bestEnd]}
}

// Trace is a person's view of what happened around a violation: the
// admissions in the window per replica, every fault of the run, and the
// events around the window's two ends.
func (r *Recorder) Trace(v *Violation, faults []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "violation: %s\n", v)
	per := map[int]int{}
	for _, a := range v.Calls {
		per[a.Replica] += a.N
	}
	reps := make([]int, 0, len(per))
	for k := range per {
		reps = append(reps, k)
	}
	slices.Sort(reps)
	b.WriteString("units in the window by replica:")
	for _, k := range reps {
		fmt.Fprintf(&b, " r%d=%d", k, per[k])
	}
	if v.AtAPI {
		fmt.Fprintf(&b, "\ncalls in the window by arrival (the API is %s away one way):", fmtDur(v.OneWay))
		for i, a := range v.Calls {
			if i == 40 {
				fmt.Fprintf(&b, "\n  ... %d more", len(v.Calls)-i)
				break
			}
			if a.Sent {
				wrote := a.Arrive - v.OneWay
				fmt.Fprintf(&b, "\n  %12s  r%-3d n=%d request handed over at %s, written %s later",
					fmtDur(a.Arrive), a.Replica, a.N, fmtDur(a.At), fmtDur(wrote-a.At))
			} else {
				fmt.Fprintf(&b, "\n  %12s  r%-3d n=%d admitted at %s", fmtDur(a.Arrive), a.Replica, a.N, fmtDur(a.At))
			}
		}
	}
	b.WriteString("\nfaults of this run:\n")
	for _, f := range faults {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	evs := r.Events()
	margin := min(v.Interval/4, 200*time.Millisecond)
	window := func(from, to time.Duration, most int, last bool) {
		var in []Event
		for _, e := range evs {
			if e.At >= from && e.At <= to {
				in = append(in, e)
			}
		}
		if len(in) > most {
			if last {
				fmt.Fprintf(&b, "  ... %d earlier events\n", len(in)-most)
				in = in[len(in)-most:]
			} else {
				defer fmt.Fprintf(&b, "  ... %d later events\n", len(in)-most)
				in = in[:most]
			}
		}
		for _, e := range in {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	// At the API, what happened a way's length before the window counts
	// too: its calls were made (or written) then.
	end, way, last := v.Calls[len(v.Calls)-1].At, time.Duration(0), "admission"
	if v.AtAPI {
		end, way, last = v.Calls[len(v.Calls)-1].Arrive, v.OneWay, "arrival"
	}
	fmt.Fprintf(&b, "events as the window opens (%s):\n", fmtDur(v.From))
	window(v.From-way-margin, v.From+margin, 25, false)
	fmt.Fprintf(&b, "events up to its last %s (%s):\n", last, fmtDur(end))
	window(end-way-margin, end, 25, true)
	return b.String()
}

// fmtDur prints virtual times compactly, to the microsecond.
func fmtDur(d time.Duration) string { return d.Truncate(time.Microsecond).String() }
