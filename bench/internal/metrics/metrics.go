// Package metrics holds the arithmetic the harness reports: Jain's fairness
// index, what a strict sliding-window API would have rejected, the most calls
// in any window, percentiles and rolling counts. Times are nanoseconds on one
// clock (the harness process's), sorted ascending where the doc says so.
package metrics

import (
	"cmp"
	"math"
	"slices"
)

// Jain returns Jain's fairness index of xs, (Σx)² / (n·Σx²): 1 when every
// value is equal, 1/n when one value holds everything. It returns 1 for an
// empty slice or all zeros (nothing to be unfair about).
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if len(xs) == 0 || sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// StrictRejects returns how many of the arrivals (sorted ascending) a strict
// sliding-window API would have rejected: an arrival at t is accepted when
// fewer than limit accepted arrivals lie in (t-window, t], and a rejected
// arrival is not counted toward later windows.
func StrictRejects(sorted []int64, limit int, window int64) int {
	if limit < 1 {
		return len(sorted)
	}
	accepted := make([]int64, 0, len(sorted))
	head, rejected := 0, 0
	for _, t := range sorted {
		for head < len(accepted) && accepted[head] <= t-window {
			head++
		}
		if len(accepted)-head >= limit {
			rejected++
			continue
		}
		accepted = append(accepted, t)
	}
	return rejected
}

// MaxInWindow returns the largest number of arrivals (sorted ascending) in
// any half-open window of length window: max over t of #(t-window, t].
func MaxInWindow(sorted []int64, window int64) int {
	if window <= 0 {
		return 0
	}
	best, head := 0, 0
	for i, t := range sorted {
		for sorted[head] <= t-window {
			head++
		}
		best = max(best, i-head+1)
	}
	return best
}

// Percentile returns the p-th percentile (0 < p <= 100) of xs by the
// nearest-rank method: the smallest value with at least p% of xs at or below
// it. It returns 0 for an empty slice. xs is not modified.
func Percentile(xs []int64, p float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return PercentileSorted(s, p)
}

// PercentileSorted is Percentile for an already sorted slice.
func PercentileSorted(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// CountIn returns how many of the sorted values lie in [from, to).
func CountIn(sorted []int64, from, to int64) int {
	lo, _ := slices.BinarySearch(sorted, from)
	hi, _ := slices.BinarySearch(sorted, to)
	return hi - lo
}

// Rolling returns, for t = step, 2·step, ... up to end, the number of
// arrivals (sorted ascending) in (t-window, t]: the count a sliding window
// ending at t holds.
func Rolling(sorted []int64, window, step, end int64) []int {
	if step <= 0 || end < step {
		return nil
	}
	out := make([]int, 0, end/step)
	for t := step; t <= end; t += step {
		lo, _ := slices.BinarySearch(sorted, t-window+1)
		hi, _ := slices.BinarySearch(sorted, t+1)
		out = append(out, hi-lo)
	}
	return out
}

// MeanInWindow returns the time-average, over t in [from, to), of the number
// of arrivals in the trailing window (t-window, t]: how full the sliding
// window was on average. Divided by the limit it is the utilization of the
// quota; divided by window it is the admission rate, without the edge effects
// of counting a bursty pattern between two fixed instants. Each arrival at a
// counts for the part of [a, a+window) that lies in [from, to).
func MeanInWindow(arrivals []int64, window, from, to int64) float64 {
	if to <= from || window <= 0 {
		return 0
	}
	var total float64
	for _, a := range arrivals {
		lo, hi := max(a, from), min(a+window, to)
		if hi > lo {
			total += float64(hi - lo)
		}
	}
	return total / float64(to-from)
}

// Span is a call in flight over [Start, End).
type Span struct{ Start, End int64 }

// MaxConcurrent returns the most spans in flight at once. A span ending at
// t is out before one starting at t comes in (they are half-open).
func MaxConcurrent(spans []Span) int {
	type edge struct {
		at    int64
		delta int
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.Start, 1}, edge{s.End, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return a.delta - b.delta // ends first
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most
}

// MeanConcurrent returns the time-weighted mean number of spans in flight
// over [from, to): the time spans spent in it, summed, over its length.
func MeanConcurrent(spans []Span, from, to int64) float64 {
	if to <= from {
		return 0
	}
	var busy int64
	for _, s := range spans {
		if d := min(s.End, to) - max(s.Start, from); d > 0 {
			busy += d
		}
	}
	return float64(busy) / float64(to-from)
}
