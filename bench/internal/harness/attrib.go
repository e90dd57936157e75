package harness

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-throttler/throttler/bench/internal/fakeapi"
	"github.com/go-throttler/throttler/bench/internal/metrics"
)

// AttribRow attributes a run's windows over the limit at the API to their
// calls (see metrics.Attribute): every time is in milliseconds after the
// replicas were told to go, on the one clock of the machine.
type AttribRow struct {
	BufferMs float64 `json:"buffer_ms"`
	Calls    int     `json:"calls"`  // arrivals at the API
	Scored   int     `json:"scored"` // of which with a score
	// ScoresMax is the most scores of the run's calls in a window of
	// interval + buffer: above the limit, the set's invariant broke.
	ScoresMax int `json:"scores_max_in_window"`
	// Classes counts every call by class (metrics.Class names).
	Classes map[string]int `json:"classes"`
	// Excess sums the windows' excesses, and Intruders their intruders by
	// class.
	Excess    int            `json:"excess"`
	Intruders map[string]int `json:"intruders"`
	// Conns splits the calls by connection: new (the first call on it)
	// or reused.
	Conns ConnRow `json:"conns"`
	// All is over every call; Overfull over the calls of the windows over
	// the limit.
	All      Deltas `json:"all"`
	Overfull Deltas `json:"overfull"`
	// APIStalls are the times the API's process (the harness) did not run
	// for 10ms or more (fakeapi.Stall): calls reaching it then were timed
	// when it ran again, later than they came.
	APIStalls []StallMs `json:"api_stalls,omitempty"`
	// Tightest is the run's nearest approach to a window over the limit
	// (nil with limit or fewer calls).
	Tightest *TightestGroup `json:"tightest,omitempty"`
	// CallList is every call, by arrival, with -calls (Options.Calls).
	CallList []CallRecord `json:"call_list,omitempty"`
	// Windows are the stretches of windows over the limit, in time order.
	Windows  []OverWindow    `json:"windows,omitempty"`
	Replicas []AttribReplica `json:"replicas"`
}

// Deltas are the distributions of the differences between a call's times,
// each over the calls that have both (nil: none has).
type Deltas struct {
	ArrivalScore    *DistMs `json:"arrival_minus_score,omitempty"`
	ReturnedScore   *DistMs `json:"returned_minus_score,omitempty"`
	ArrivalReturned *DistMs `json:"arrival_minus_returned,omitempty"`
	SentReturned    *DistMs `json:"sent_minus_returned,omitempty"`
	ArrivalSent     *DistMs `json:"arrival_minus_sent,omitempty"`
}

// ConnRow splits a run's calls by the connection they came on.
type ConnRow struct {
	// New is how many calls came first on a connection. Go's Transport
	// may keep a connection it dialed for a call that another one served
	// first, for a later call: Dialed is those of them whose connection
	// the API accepted after the call was sent (it was dialed for it), and
	// DialedClasses those by class.
	New           int            `json:"new"`
	Dialed        int            `json:"dialed"`
	DialedClasses map[string]int `json:"dialed_classes"`
	// ArrivalSentDialed and ArrivalSentOther: arrival - sent of the calls
	// that dialed and of the others; AcceptSent is accepted - sent (the
	// dial, until the API's accept loop took the connection) and
	// ArrivalAccept arrival - accepted (from there to the handler), both
	// over the calls that dialed.
	ArrivalSentDialed *DistMs `json:"arrival_minus_sent_dialed,omitempty"`
	ArrivalSentOther  *DistMs `json:"arrival_minus_sent_other,omitempty"`
	AcceptSent        *DistMs `json:"accepted_minus_sent,omitempty"`
	ArrivalAccept     *DistMs `json:"arrival_minus_accepted,omitempty"`
}

// DistMs is a metrics.Dist in milliseconds.
type DistMs struct {
	N   int     `json:"n"`
	Min float64 `json:"min"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// OverWindow is one maximal stretch of windows over the limit at the API:
// the windows (t-interval, t] for t in [FromMs, ToMs).
type OverWindow struct {
	FromMs float64 `json:"from_ms"`
	ToMs   float64 `json:"to_ms"`
	// The fullest window of the stretch, (PeakStartMs, PeakStartMs +
	// interval], and its calls: Peak, Excess over the limit.
	PeakStartMs float64 `json:"peak_start_ms"`
	Peak        int     `json:"peak"`
	Excess      int     `json:"excess"`
	// First: the stretch holds calls that arrived in the first interval.
	First bool `json:"first_window"`
	// In the fullest window: its calls by class, those with their scores
	// in its score window (at most the limit while the invariant holds)
	// and the others, the intruders, by class.
	PeakClasses   map[string]int `json:"peak_classes"`
	Accounted     int            `json:"peak_accounted"`
	PeakIntruders map[string]int `json:"peak_intruders"`
	// Over the whole stretch: its calls by class, and those that intrude
	// into one of its windows.
	Classes   map[string]int `json:"classes"`
	Intruders map[string]int `json:"intruders"`
	// ScoresMax is the most of its calls' scores in a window of interval +
	// buffer; ScoresOver says it is above the limit.
	ScoresMax  int  `json:"scores_max_in_window"`
	ScoresOver bool `json:"scores_over"`
	// Cause sums it up: "scores over the limit", else the intruders'
	// classes of the fullest window, most first.
	Cause string `json:"cause"`
	// APIStalledMs is how long the API's process stalled (APIStalls)
	// between the first intruder's send and the last one's arrival: calls
	// late by HTTP then may have been late in the API's own process.
	APIStalledMs float64 `json:"api_stalled_ms"`
	// PeakIntrudersDialed is how many of the fullest window's intruders
	// dialed a connection of their own (ConnRow).
	PeakIntrudersDialed int `json:"peak_intruders_dialed"`
	// IntruderReplicas lists the replicas of the stretch's intruders, with
	// how many each.
	IntruderReplicas map[int]int  `json:"intruder_replicas"`
	Deltas           Deltas       `json:"deltas"`
	Calls            []CallRecord `json:"calls"`
}

// TightestGroup is the limit+1 consecutive arrivals at the API that span
// the least time (metrics.Tightest): a window holds more than the limit
// exactly when such a group spans less than the interval.
type TightestGroup struct {
	StartMs float64 `json:"start_ms"` // its first arrival
	SpanMs  float64 `json:"span_ms"`  // from its first arrival to its last
	// MarginMs is SpanMs - interval: negative, a window over the limit.
	MarginMs float64 `json:"margin_ms"`
	First    bool    `json:"first_window"` // it starts in the first interval
	// ScoresSpanMs is its scores' spread, max - min (nil: none has a
	// score); while the invariant holds, at least interval + buffer.
	ScoresSpanMs *float64       `json:"scores_span_ms,omitempty"`
	Classes      map[string]int `json:"classes"`
	// FirstCall and LastCall are its ends: the span is their scores' gap
	// plus the last's arrival - score minus the first's.
	FirstCall CallRecord `json:"first_call"`
	LastCall  CallRecord `json:"last_call"`
}

// CallRecord is one call of a stretch over the limit.
type CallRecord struct {
	Replica    int      `json:"replica"`
	Tenant     string   `json:"tenant,omitempty"`
	ArrivalMs  float64  `json:"arrival_ms"`
	ScoreMs    *float64 `json:"score_ms,omitempty"`
	StartedMs  *float64 `json:"started_ms,omitempty"`
	ReturnedMs *float64 `json:"returned_ms,omitempty"`
	SentMs     *float64 `json:"sent_ms,omitempty"`
	Class      string   `json:"class"`
	InPeak     bool     `json:"in_peak"`
	Intruder   bool     `json:"intruder"`
	// NewConn: the call came first on its connection, which the API
	// accepted ConnMs after go (before the call was sent: a connection
	// the Transport dialed earlier and kept).
	NewConn bool     `json:"new_conn,omitempty"`
	ConnMs  *float64 `json:"conn_ms,omitempty"`
	// EstOffsetMs is how far ahead of the server the replica's clock
	// estimate was when its Wait returned, as rebuilt from the hook's
	// samples (see AttribReplica); absent before the first sample.
	EstOffsetMs *float64 `json:"est_offset_ms,omitempty"`
}

// AttribReplica is one replica's calls and clock samples.
type AttribReplica struct {
	Replica   int            `json:"replica"`
	Calls     int            `json:"calls"`
	Classes   map[string]int `json:"classes"`
	Intruders int            `json:"intruders"` // in the run's windows over the limit
	Deltas    Deltas         `json:"deltas"`
	Clock     ClockRow       `json:"clock"`
}

// ClockRow is a replica's clock samples as its Redis hook timed them: the
// round trips that carried a TIME. The library times the same round trips
// a little wider (its send and receive enclose the hook's, and with the
// default client a hand-off to go-redis's goroutine too), so the library's
// own samples have longer round trips and offsets that may differ by up to
// half that difference; the estimate here is the library's rule
// (metrics.ClockEstimate) applied to the hook's samples.
type ClockRow struct {
	Samples int `json:"samples"`
	// First is the first sample: when it was sent, its round trip, and the
	// server's reading after its midpoint (the first estimate's error).
	First *SampleMs `json:"first,omitempty"`
	// FirstInterval is the samples sent in the first interval.
	FirstInterval []SampleMs `json:"first_interval,omitempty"`
	RTT           *DistMs    `json:"rtt,omitempty"`
	// EstOffsetMin/Max: the least and most the estimate was ahead of the
	// server (negative: behind), over the run, and over its first
	// interval (from the first sample).
	EstOffsetMinMs      float64 `json:"est_offset_min_ms"`
	EstOffsetMaxMs      float64 `json:"est_offset_max_ms"`
	EstOffsetFirstMinMs float64 `json:"est_offset_first_min_ms"`
	EstOffsetFirstMaxMs float64 `json:"est_offset_first_max_ms"`
}

// StallMs is a stall of the API's process: from AtMs after go, for LenMs.
type StallMs struct {
	AtMs  float64 `json:"at_ms"`
	LenMs float64 `json:"len_ms"`
}

// stalledIn returns how much of [from, to) the stalls cover (ns after go).
func stalledIn(stalls []StallMs, from, to int64) float64 {
	var sum float64
	for _, st := range stalls {
		lo, hi := max(st.AtMs, nsMs(from)), min(st.AtMs+st.LenMs, nsMs(to))
		if hi > lo {
			sum += hi - lo
		}
	}
	return sum
}

// SampleMs is one clock sample in milliseconds: sent SentMs after go.
type SampleMs struct {
	SentMs   float64 `json:"sent_ms"`
	RTTMs    float64 `json:"rtt_ms"`
	OffsetMs float64 `json:"offset_ms"`
}

// attribution attributes one run's windows over the limit at the API.
func attribution(sc Scenario, buffer time.Duration, t0 time.Time, arrivals []fakeapi.Arrival, stalls []fakeapi.Stall, results []ReplicaResult, all bool) *AttribRow {
	base := t0.UnixNano()
	rel := func(t time.Time) int64 { return t.UnixNano() - base }
	var apiStalls []StallMs
	for _, st := range stalls {
		apiStalls = append(apiStalls, StallMs{AtMs: nsMs(rel(st.At)), LenMs: ms(st.Len)})
	}
	arrivals = slices.Clone(arrivals)
	slices.SortStableFunc(arrivals, func(x, y fakeapi.Arrival) int { return cmp.Compare(x.At.UnixNano(), y.At.UnixNano()) })
	calls := make([]metrics.Call, len(arrivals))
	conns := make([]conn, len(arrivals))
	for i, a := range arrivals {
		c := metrics.Call{Replica: a.Replica, Arrival: rel(a.At), Tenant: a.Tenant}
		if !a.Score.IsZero() {
			c.Score, c.HasScore = rel(a.Score), true
		}
		if !a.Started.IsZero() && !a.Returned.IsZero() && !a.Sent.IsZero() {
			c.Started, c.Returned, c.Sent, c.HasTimes = rel(a.Started), rel(a.Returned), rel(a.Sent), true
		}
		calls[i] = c
		if a.NewConn {
			conns[i] = conn{fresh: true, at: rel(a.ConnAt)}
		}
	}

	// Each replica's clock samples, on the same base.
	samples := map[int][]metrics.ClockSample{}
	for _, r := range results {
		for _, s := range r.ClockSamples {
			s.SentNs -= base
			samples[r.Index] = append(samples[r.Index], s)
		}
	}
	window := int64(sc.Interval)
	at := metrics.Attribute(calls, sc.Limit, window, int64(buffer))
	row := &AttribRow{BufferMs: ms(buffer), Calls: len(calls), ScoresMax: at.ScoresMax,
		Classes: classMap(at.Classes), Intruders: map[string]int{}, All: deltas(calls, nil), APIStalls: apiStalls}
	for _, c := range calls {
		if c.HasScore {
			row.Scored++
		}
	}
	if all {
		for i, c := range calls {
			row.CallList = append(row.CallList, record(c, at.Class[i], samples[c.Replica], conns[i]))
		}
	}
	ts := make([]int64, len(calls))
	for i, c := range calls {
		ts[i] = c.Arrival
	}
	if i, span, ok := metrics.Tightest(ts, sc.Limit); ok {
		g := &TightestGroup{StartMs: nsMs(calls[i].Arrival), SpanMs: nsMs(span), MarginMs: nsMs(span - window),
			First: calls[i].Arrival < window}
		var cls [metrics.NumClasses]int
		var lo, hi int64
		scored := false
		for k := i; k <= i+sc.Limit; k++ {
			c := calls[k]
			cls[at.Class[k]]++
			if c.HasScore {
				if !scored {
					lo, hi, scored = c.Score, c.Score, true
				}
				lo, hi = min(lo, c.Score), max(hi, c.Score)
			}
		}
		if scored {
			g.ScoresSpanMs = ptr(nsMs(hi - lo))
		}
		g.Classes = classMap(cls)
		j := i + sc.Limit
		g.FirstCall = record(calls[i], at.Class[i], samples[calls[i].Replica], conns[i])
		g.LastCall = record(calls[j], at.Class[j], samples[calls[j].Replica], conns[j])
		row.Tightest = g
	}
	row.Conns = connRow(calls, conns, at.Class)
	intruders := map[int]int{} // by replica, over every stretch
	var overfull []int
	var sum [metrics.NumClasses]int
	for _, w := range at.Windows {
		ow := OverWindow{
			FromMs: nsMs(w.From), ToMs: nsMs(w.To), PeakStartMs: nsMs(w.PeakEnd - window), Peak: w.Peak, Excess: w.Excess,
			First: calls[w.Lo].Arrival < window, PeakClasses: classMap(w.PeakClasses), Accounted: w.Accounted,
			PeakIntruders: classMap(w.PeakIntruders), Classes: classMap(w.Classes), Intruders: classMap(w.Intruders),
			ScoresMax: w.ScoresMax, ScoresOver: w.ScoresOver(sc.Limit), IntruderReplicas: map[int]int{},
		}
		ow.Cause = cause(w, sc.Limit)
		in := map[int]bool{}
		if len(w.IntruderIx) > 0 {
			from, to := int64(1<<62), int64(-1<<62)
			for _, i := range w.IntruderIx {
				c := calls[i]
				sent := c.Arrival
				if c.HasTimes {
					sent = c.Sent
				}
				from, to = min(from, sent), max(to, c.Arrival)
			}
			ow.APIStalledMs = stalledIn(apiStalls, from, to)
		}
		for _, i := range w.PeakIntruderIx {
			if conns[i].dialed(calls[i]) {
				ow.PeakIntrudersDialed++
			}
		}
		for _, i := range w.IntruderIx {
			in[i] = true
			ow.IntruderReplicas[calls[i].Replica]++
			intruders[calls[i].Replica]++
		}
		var ix []int
		for i := w.Lo; i < w.Hi; i++ {
			ix = append(ix, i)
			c := calls[i]
			rec := record(c, at.Class[i], samples[c.Replica], conns[i])
			rec.Intruder, rec.InPeak = in[i], c.Arrival > w.PeakEnd-window && c.Arrival <= w.PeakEnd
			ow.Calls = append(ow.Calls, rec)
		}
		ow.Deltas = deltas(calls, ix)
		overfull = append(overfull, ix...)
		row.Excess += w.Excess
		for c, n := range w.Intruders {
			sum[c] += n
		}
		row.Windows = append(row.Windows, ow)
	}
	row.Intruders = classMap(sum)
	slices.Sort(overfull)
	row.Overfull = deltas(calls, slices.Compact(overfull))

	for p := range max(sc.Procs, 0) {
		var ix []int
		var cls [metrics.NumClasses]int
		for i, c := range calls {
			if c.Replica == p {
				ix = append(ix, i)
				cls[at.Class[i]]++
			}
		}
		row.Replicas = append(row.Replicas, AttribReplica{Replica: p, Calls: len(ix), Classes: classMap(cls),
			Intruders: intruders[p], Deltas: deltas(calls, ix), Clock: clockRow(samples[p], window)})
	}
	return row
}

// record is c's CallRecord, with the clock estimate its replica held when
// its Wait returned, as rebuilt from samples.
func record(c metrics.Call, class metrics.Class, samples []metrics.ClockSample, cn conn) CallRecord {
	rec := CallRecord{Replica: c.Replica, Tenant: c.Tenant, ArrivalMs: nsMs(c.Arrival), Class: class.String(), NewConn: cn.fresh}
	if cn.fresh {
		rec.ConnMs = ptr(nsMs(cn.at))
	}
	if c.HasScore {
		rec.ScoreMs = ptr(nsMs(c.Score))
	}
	if c.HasTimes {
		rec.StartedMs, rec.ReturnedMs, rec.SentMs = ptr(nsMs(c.Started)), ptr(nsMs(c.Returned)), ptr(nsMs(c.Sent))
		if off, _, ok := metrics.ClockEstimate(samples, c.Returned); ok {
			rec.EstOffsetMs = ptr(nsMs(off))
		}
	}
	return rec
}

// conn is what the API knew of a call's connection: new (the call was its
// first) and accepted at (ns after go).
type conn struct {
	fresh bool
	at    int64
}

// dialed reports whether the call's connection was dialed for it: it came
// first on a connection the API accepted after the call was sent.
func (cn conn) dialed(c metrics.Call) bool { return cn.fresh && c.HasTimes && cn.at >= c.Sent }

// connRow splits the calls by connection.
func connRow(calls []metrics.Call, conns []conn, class []metrics.Class) ConnRow {
	var r ConnRow
	var cls [metrics.NumClasses]int
	var asDialed, asOther, accSent, arrAcc []int64
	for i, c := range calls {
		if conns[i].fresh {
			r.New++
		}
		if !c.HasTimes {
			continue
		}
		if conns[i].dialed(c) {
			r.Dialed++
			cls[class[i]]++
			asDialed = append(asDialed, c.Arrival-c.Sent)
			accSent = append(accSent, conns[i].at-c.Sent)
			arrAcc = append(arrAcc, c.Arrival-conns[i].at)
		} else {
			asOther = append(asOther, c.Arrival-c.Sent)
		}
	}
	r.DialedClasses = classMap(cls)
	r.ArrivalSentDialed, r.ArrivalSentOther = distMs(asDialed), distMs(asOther)
	r.AcceptSent, r.ArrivalAccept = distMs(accSent), distMs(arrAcc)
	return r
}

// cause sums up a stretch: scores over the limit, or the classes of its
// fullest window's intruders, most first.
func cause(w metrics.Window, limit int) string {
	if w.ScoresOver(limit) {
		return "scores over the limit"
	}
	type kv struct {
		c metrics.Class
		n int
	}
	var ks []kv
	for c, n := range w.PeakIntruders {
		if n > 0 {
			ks = append(ks, kv{metrics.Class(c), n})
		}
	}
	if len(ks) == 0 {
		if w.PeakClasses[metrics.NoScore] > 0 {
			return "no scores"
		}
		return "none found"
	}
	slices.SortStableFunc(ks, func(a, b kv) int { return b.n - a.n })
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %d", k.c, k.n))
	}
	return strings.Join(parts, ", ")
}

// classMap names the classes with calls.
func classMap(cls [metrics.NumClasses]int) map[string]int {
	m := map[string]int{}
	for c, n := range cls {
		if n > 0 {
			m[metrics.Class(c).String()] = n
		}
	}
	return m
}

// deltas gives the distributions over calls[ix] (every call when ix is
// nil).
func deltas(calls []metrics.Call, ix []int) Deltas {
	var as, rs, ar, sr, asent []int64
	each := func(c metrics.Call) {
		if c.HasScore {
			as = append(as, c.Arrival-c.Score)
			if c.HasTimes {
				rs = append(rs, c.Returned-c.Score)
			}
		}
		if c.HasTimes {
			ar = append(ar, c.Arrival-c.Returned)
			sr = append(sr, c.Sent-c.Returned)
			asent = append(asent, c.Arrival-c.Sent)
		}
	}
	if ix == nil {
		for _, c := range calls {
			each(c)
		}
	}
	for _, i := range ix {
		each(calls[i])
	}
	return Deltas{ArrivalScore: distMs(as), ReturnedScore: distMs(rs), ArrivalReturned: distMs(ar),
		SentReturned: distMs(sr), ArrivalSent: distMs(asent)}
}

func distMs(xs []int64) *DistMs {
	if len(xs) == 0 {
		return nil
	}
	d := metrics.Distribution(xs)
	return &DistMs{N: d.N, Min: nsMs(d.Min), P50: nsMs(d.P50), P99: nsMs(d.P99), Max: nsMs(d.Max)}
}

// clockRow sums up a replica's clock samples (SentNs after go).
func clockRow(samples []metrics.ClockSample, window int64) ClockRow {
	r := ClockRow{Samples: len(samples)}
	if len(samples) == 0 {
		return r
	}
	toMs := func(s metrics.ClockSample) SampleMs {
		return SampleMs{SentMs: nsMs(s.SentNs), RTTMs: nsMs(s.RTTNs), OffsetMs: nsMs(s.OffsetNs)}
	}
	r.First = ptr(toMs(samples[0]))
	rtts := make([]int64, len(samples))
	first := true
	for i, s := range samples {
		rtts[i] = s.RTTNs
		if s.SentNs < window {
			r.FirstInterval = append(r.FirstInterval, toMs(s))
		}
		// The estimate changes only as a sample comes back.
		off, _, _ := metrics.ClockEstimate(samples, s.SentNs+s.RTTNs)
		o := nsMs(off)
		if i == 0 {
			r.EstOffsetMinMs, r.EstOffsetMaxMs = o, o
		}
		r.EstOffsetMinMs, r.EstOffsetMaxMs = min(r.EstOffsetMinMs, o), max(r.EstOffsetMaxMs, o)
		if s.SentNs+s.RTTNs < window {
			if first {
				r.EstOffsetFirstMinMs, r.EstOffsetFirstMaxMs, first = o, o, false
			}
			r.EstOffsetFirstMinMs, r.EstOffsetFirstMaxMs = min(r.EstOffsetFirstMinMs, o), max(r.EstOffsetFirstMaxMs, o)
		}
	}
	r.RTT = distMs(rtts)
	return r
}

// nsMs is nanoseconds in milliseconds.
func nsMs(ns int64) float64 { return float64(ns) / 1e6 }

// writeAttrib writes, when any row has a window over the limit at the API
// with its calls' times, the attribution of those windows: one line per
// stretch of windows over the limit, the distributions of the rows that
// have any, and the replicas whose calls intruded.
func writeAttrib(b *strings.Builder, rows []Row, multi bool) {
	var over []Row
	for _, row := range rows {
		if row.Attrib != nil && len(row.Attrib.Windows) > 0 {
			over = append(over, row)
		}
	}
	if len(over) == 0 {
		return
	}
	run := func(row Row) string {
		if !multi {
			return row.Scenario + " | " + row.Impl
		}
		return fmt.Sprintf("%s | %s | %d", row.Scenario, row.Impl, row.Run)
	}
	head := func(s, sep string) {
		b.WriteString(runCols(s, sep, 1, multi))
	}
	b.WriteString("Windows over the limit at the API, by stretch (times in ms after go; the fullest window of each, and the calls in it whose scores lie outside its score window of interval + buffer: early, estimate behind, late wake, late send, late HTTP; how long the API's own process stalled while the intruders were on their way; see the README):\n\n")
	head("| over the limit | impl | fullest window | calls | excess | first window | accounted | early | estimate behind | late wake | late send | late HTTP | API stalled (ms) | intruder replicas (calls) | most scores in interval + buffer | cause |\n",
		"|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|\n")
	for _, row := range over {
		for _, w := range row.Attrib.Windows {
			first := "no"
			if w.First {
				first = "yes"
			}
			fmt.Fprintf(b, "| %s | (%.1f, %.1f] | %d | %d | %s | %d | %d | %d | %d | %d | %s | %.0f | %s | %s | %s |\n",
				run(row), w.PeakStartMs, w.PeakStartMs+row.IntervalMs, w.Peak, w.Excess, first, w.Accounted,
				w.PeakIntruders["early"], w.PeakIntruders["estimate behind"], w.PeakIntruders["late wake"], w.PeakIntruders["late send"], lateHTTP(w),
				w.APIStalledMs, replicaList(w.IntruderReplicas), optI(&w.ScoresMax, row.Limit), w.Cause)
		}
	}
	b.WriteString("\n")

	dist := func(d *DistMs) string {
		if d == nil {
			return "—"
		}
		return fmt.Sprintf("%.1f / %.1f / %.1f / %.1f", d.Min, d.P50, d.P99, d.Max)
	}
	head("| calls (ms: min / p50 / p99 / max) | impl | which | n | arrival − score | returned − score | arrival − returned |\n",
		"|---|---|---|---:|---:|---:|---:|\n")
	for _, row := range over {
		for _, c := range []struct {
			which string
			d     Deltas
		}{{"all", row.Attrib.All}, {"windows over the limit", row.Attrib.Overfull}} {
			n := 0
			if c.d.ArrivalReturned != nil {
				n = c.d.ArrivalReturned.N
			}
			fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s |\n", run(row), c.which, n,
				dist(c.d.ArrivalScore), dist(c.d.ReturnedScore), dist(c.d.ArrivalReturned))
		}
	}
	b.WriteString("\n")

	intruding := false
	for _, row := range over {
		for _, r := range row.Attrib.Replicas {
			intruding = intruding || r.Intruders > 0
		}
	}
	if !intruding {
		return
	}
	head("| intruding replicas | impl | replica | intruders | its calls: early, estimate behind, late wake, late send, late HTTP | arrival − score min / max | returned − score min / max | first clock sample: sent, RTT, offset | estimate ahead in the first interval |\n",
		"|---|---|---:|---:|---|---:|---:|---|---|\n")
	for _, row := range over {
		for _, r := range row.Attrib.Replicas {
			if r.Intruders == 0 {
				continue
			}
			mm := func(d *DistMs) string {
				if d == nil {
					return "—"
				}
				return fmt.Sprintf("%.1f / %.1f", d.Min, d.Max)
			}
			sample, ahead := "—", "—"
			if f := r.Clock.First; f != nil {
				sample = fmt.Sprintf("%.1f, %.2f, %+.2f", f.SentMs, f.RTTMs, f.OffsetMs)
				ahead = fmt.Sprintf("%+.2f to %+.2f", r.Clock.EstOffsetFirstMinMs, r.Clock.EstOffsetFirstMaxMs)
			}
			fmt.Fprintf(b, "| %s | %d | %d | %d, %d, %d, %d, %d | %s | %s | %s | %s |\n", run(row), r.Replica, r.Intruders,
				r.Classes["early"], r.Classes["estimate behind"], r.Classes["late wake"], r.Classes["late send"], r.Classes["late HTTP"],
				mm(r.Deltas.ArrivalScore), mm(r.Deltas.ReturnedScore), sample, ahead)
		}
	}
	b.WriteString("\n")
}

// lateHTTP is the fullest window's late HTTP intruders, and how many of
// its intruders dialed a connection of their own when any did.
func lateHTTP(w OverWindow) string {
	s := fmt.Sprint(w.PeakIntruders["late HTTP"])
	if w.PeakIntrudersDialed > 0 {
		s += fmt.Sprintf(" (intruders that dialed: %d)", w.PeakIntrudersDialed)
	}
	return s
}

// replicaList formats replicas and their counts, most first.
func replicaList(m map[int]int) string {
	if len(m) == 0 {
		return "—"
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b int) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return a - b
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d (%d)", k, m[k])
	}
	return strings.Join(parts, ", ")
}
