package metrics

import (
	"slices"
)

// This file attributes the windows over the limit at the API: for each
// call, its score (the server time the throttler counted it at), when its
// Wait returned, when it was sent and when it arrived, all on one clock.
//
// The library keeps its set's invariant on scores: no window of length
// interval + buffer holds more than limit of them. A call is meant to
// reach the API within half the buffer of its score. So an API window
// (t-interval, t] holds, of the calls that kept to that, only calls whose
// scores lie in (t-interval-half, t+half], a window of length interval +
// buffer: at most limit of them, while the invariant holds. A window over
// the limit has either scores over the limit (the invariant broke), or
// intruders: calls whose scores lie outside that score window, there only
// because they arrived more than half the buffer from their scores. Every
// call over the limit is then matched by an intruder, and each intruder
// has a class: early (it arrived before its score: the replica's estimate
// of the server's clock ran ahead), estimate behind (late, and scored
// before its Wait even began: the estimate lagged), late wake (its Wait
// returned late), late send (its Wait returned in time, its request went
// late) or late HTTP (sent in time, arrived late).

// Call is one call that reached the API. Times are nanoseconds on one
// clock. Started, Returned and Sent are known when HasTimes, Score when
// HasScore.
type Call struct {
	Replica  int
	Arrival  int64  // when the API took it
	Score    int64  // the server time it was counted at
	Started  int64  // when its Wait (Acquire) was called in the replica
	Returned int64  // when its Wait (Acquire) returned in the replica
	Sent     int64  // right before its request was sent
	Tenant   string // the tenant it was made for ("" without one)
	HasScore bool
	HasTimes bool
}

// Class is where a call arrived against its score.
type Class uint8

const (
	// InTime: it arrived within half the buffer of its score.
	InTime Class = iota
	// Early: it arrived more than half the buffer before its score. Its
	// Wait returned before the score too: the replica's estimate of the
	// server's clock ran ahead of the server.
	Early
	// Behind: it arrived more than half the buffer after its score, which
	// lay more than half the buffer before its Wait even began: no slot is
	// given in the past, so the replica's estimate of the server's clock
	// lagged the server (a call admitted at once is scored at the
	// estimate's now, and goes at once). A late wake the clock caused.
	Behind
	// LateWake: it arrived more than half the buffer after its score, and
	// its Wait returned that late already (and began in time): the library
	// woke it late (or answered late).
	LateWake
	// LateSend: it arrived late, its Wait returned in time but its request
	// was sent more than half the buffer after its score: the caller's
	// goroutine ran late after Wait returned.
	LateSend
	// LateHTTP: it arrived late, sent in time: the HTTP path (the client's
	// connection, the API's handler) was slow.
	LateHTTP
	// NoScore: the implementation keeps no score to compare with.
	NoScore
	// NumClasses is the number of classes, for arrays indexed by Class.
	NumClasses
)

var classNames = [NumClasses]string{"in time", "early", "estimate behind", "late wake", "late send", "late HTTP", "no score"}

// String returns the class's name, as the harness reports it.
func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return "?"
}

// Classify returns c's class, half being half the buffer: the margin a call
// may arrive on either side of its score. A call with a score but without
// Returned and Sent is a late wake when late (nothing shows that it
// returned in time).
func Classify(c Call, half int64) Class {
	if !c.HasScore {
		return NoScore
	}
	switch d := c.Arrival - c.Score; {
	case d < -half:
		return Early
	case d <= half:
		return InTime
	case !c.HasTimes:
		return LateWake
	case c.Started-c.Score > half:
		return Behind
	case c.Returned-c.Score > half:
		return LateWake
	case c.Sent-c.Score > half:
		return LateSend
	}
	return LateHTTP
}

// Stretch is a maximal run [From, To) of window ends t over which the
// window (t-window, t] holds more than limit arrivals. The arrivals in one
// of its windows, those in (From-window, To), are sorted[Lo:Hi]. Peak is
// the most any of its windows holds, and PeakEnd the end of the first
// window that holds it.
type Stretch struct {
	From, To int64
	Lo, Hi   int
	Peak     int
	PeakEnd  int64
}

// OverfullStretches returns every maximal stretch of windows of length
// window holding more than limit of the arrivals (sorted ascending), in
// time order: every window over the limit is in one of them. A window
// (t-window, t] holds an arrival a from t = a to t = a+window, excluded.
func OverfullStretches(sorted []int64, limit int, window int64) []Stretch {
	if window <= 0 {
		return nil
	}
	var out []Stretch
	var cur Stretch
	open, n, count := false, len(sorted), 0
	for i, j := 0, 0; i < n || j < n; {
		// The next instant the count changes at: an arrival comes in, or
		// one leaves a window after window.
		x := sorted[j] + window
		if i < n && sorted[i] < x {
			x = sorted[i]
		}
		for ; i < n && sorted[i] == x; i++ {
			count++
		}
		for ; j < n && sorted[j]+window == x; j++ {
			count--
		}
		switch {
		case count > limit && !open:
			open, cur = true, Stretch{From: x, Peak: count, PeakEnd: x}
		case count > limit && count > cur.Peak:
			cur.Peak, cur.PeakEnd = count, x
		case count <= limit && open:
			open, cur.To = false, x
			cur.Lo, _ = slices.BinarySearch(sorted, cur.From-window+1)
			cur.Hi, _ = slices.BinarySearch(sorted, cur.To)
			out = append(out, cur)
		}
	}
	return out
}

// Intrudes reports whether c, with a score, lies in one of the windows
// (t-window, t] for t in [from, to) whose score window (t-window-half,
// t+half] does not hold its score: it is there only because it strayed
// from its score by more than half. The windows holding c's arrival end in
// [Arrival, Arrival+window), those holding its score in [Score-half,
// Score+window+half).
func Intrudes(c Call, from, to, window, half int64) bool {
	if !c.HasScore {
		return false
	}
	lo, hi := max(c.Arrival, from), min(c.Arrival+window, to)
	if lo >= hi {
		return false // in none of those windows
	}
	return lo < c.Score-half || hi > c.Score+window+half
}

// Window is one stretch of windows over the limit, attributed.
type Window struct {
	Stretch
	// Excess is Peak - limit: the calls of its fullest window a strict
	// API would have refused.
	Excess int
	// Peak window (PeakEnd-window, PeakEnd]: its calls by class; those of
	// its calls with their scores in its score window (Accounted: the
	// invariant holds at most limit of them) and those without
	// (Intruders, by class); and calls without a score.
	PeakClasses    [NumClasses]int
	Accounted      int
	PeakIntruders  [NumClasses]int
	PeakIntruderIx []int // indices into the calls
	// All the calls of the stretch (Lo:Hi) by class, and those that
	// intrude into one of its windows, by class.
	Classes    [NumClasses]int
	Intruders  [NumClasses]int
	IntruderIx []int
	// ScoresMax is the most scores of the stretch's calls in a window of
	// length window+buffer: above the limit, the set's invariant broke
	// (a library bug) among them.
	ScoresMax int
}

// ScoresOver reports whether the stretch's scores alone are over the
// limit in a window of length interval + buffer.
func (w Window) ScoresOver(limit int) bool { return w.ScoresMax > limit }

// Attribution is what Attribute found in one run.
type Attribution struct {
	// ScoresMax is the most scores of all the calls in a window of length
	// window+buffer (0 when no call has a score): above the limit, the
	// set's invariant broke somewhere in the run.
	ScoresMax int
	// Classes counts every call by class.
	Classes [NumClasses]int
	// Class is each call's class, by index.
	Class []Class
	// Windows are the stretches over the limit at the API, attributed.
	Windows []Window
}

// Attribute attributes every window over the limit of calls (sorted by
// arrival), for a quota of limit per window with the given buffer (in the
// calls' unit).
func Attribute(calls []Call, limit int, window, buffer int64) Attribution {
	half := buffer / 2
	var a Attribution
	arrivals := make([]int64, len(calls))
	var scores []int64
	a.Class = make([]Class, len(calls))
	for i, c := range calls {
		arrivals[i] = c.Arrival
		a.Class[i] = Classify(c, half)
		a.Classes[a.Class[i]]++
		if c.HasScore {
			scores = append(scores, c.Score)
		}
	}
	slices.Sort(scores)
	a.ScoresMax = MaxInWindow(scores, window+buffer)
	for _, s := range OverfullStretches(arrivals, limit, window) {
		w := Window{Stretch: s, Excess: s.Peak - limit}
		var stretchScores []int64
		for i := s.Lo; i < s.Hi; i++ {
			c := calls[i]
			cl := a.Class[i]
			w.Classes[cl]++
			if c.HasScore {
				stretchScores = append(stretchScores, c.Score)
			}
			if Intrudes(c, s.From, s.To, window, half) {
				w.Intruders[cl]++
				w.IntruderIx = append(w.IntruderIx, i)
			}
			if c.Arrival <= s.PeakEnd-window || c.Arrival > s.PeakEnd {
				continue // not in the peak window
			}
			w.PeakClasses[cl]++
			switch {
			case !c.HasScore:
			case Intrudes(c, s.PeakEnd, s.PeakEnd+1, window, half):
				w.PeakIntruders[cl]++
				w.PeakIntruderIx = append(w.PeakIntruderIx, i)
			default:
				w.Accounted++
			}
		}
		slices.Sort(stretchScores)
		w.ScoresMax = MaxInWindow(stretchScores, window+buffer)
		a.Windows = append(a.Windows, w)
	}
	return a
}

// Dist is a distribution's size, extremes and nearest-rank percentiles.
type Dist struct {
	N                  int
	Min, P50, P99, Max int64
}

// Distribution returns xs's Dist (all zero for none). xs is not modified.
func Distribution(xs []int64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Dist{N: len(s), Min: s[0], P50: PercentileSorted(s, 50), P99: PercentileSorted(s, 99), Max: s[len(s)-1]}
}

// ClockSample is one round trip that read the server's clock: sent at
// SentNs (Unix nanoseconds, the local clock), back RTTNs later, with the
// server's reading OffsetNs after the round trip's midpoint. With the
// server on the same machine (the same clock), OffsetNs is how far an
// estimate taken from this sample alone puts the server ahead of itself.
type ClockSample struct {
	SentNs   int64 `json:"sent_ns"`
	RTTNs    int64 `json:"rtt_ns"`
	OffsetNs int64 `json:"offset_ns"`
}

// NewClockSample returns the sample of a round trip sent and received at
// sent and recv, during which the server read server (all nanoseconds).
func NewClockSample(sent, recv, server int64) ClockSample {
	return ClockSample{SentNs: sent, RTTNs: recv - sent, OffsetNs: server - (sent + (recv-sent)/2)}
}

// clockWindow is how many recent samples the library's estimate picks
// from (clockSync.samples).
const clockWindow = 8

// ClockEstimate returns the estimate the library's clock sync would hold
// at local time at (Unix nanoseconds) from samples (in the order taken,
// each back before the next was sent, as one worker's are): the offset and
// round trip of the sample with the shortest round trip among the last 8
// back by then (a tie to the earliest; the library's ring may pick another
// of the same round trip); ok is false before the first. It leaves out the
// library's restarts on a clock step (none on one clock).
func ClockEstimate(samples []ClockSample, at int64) (offset, rtt int64, ok bool) {
	n := 0
	for n < len(samples) && samples[n].SentNs+samples[n].RTTNs <= at {
		n++
	}
	if n == 0 {
		return 0, 0, false
	}
	best := samples[max(0, n-clockWindow)]
	for _, s := range samples[max(0, n-clockWindow)+1 : n] {
		if s.RTTNs < best.RTTNs {
			best = s
		}
	}
	return best.OffsetNs, best.RTTNs, true
}

// Tightest returns where limit+1 consecutive arrivals (sorted ascending)
// span the least time: sorted[i+limit] - sorted[i] is the least such
// span (the first i when tied). Some window of length w holds more than
// limit arrivals exactly when span < w: span - w is how close the run came
// to a window over the limit (negative: it had one). ok is false when
// there are limit or fewer arrivals, or limit is negative.
func Tightest(sorted []int64, limit int) (i int, span int64, ok bool) {
	if limit < 0 || len(sorted) <= limit {
		return 0, 0, false
	}
	i, span = 0, sorted[limit]-sorted[0]
	for j := 1; j+limit < len(sorted); j++ {
		if d := sorted[j+limit] - sorted[j]; d < span {
			i, span = j, d
		}
	}
	return i, span, true
}
