package core

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// peakByEveryT is Peak by trying every window end t in [g, g+w).
func peakByEveryT(scores []int64, g, w int64) int64 {
	var best int64
	for t := g; t < g+w; t++ {
		var n int64
		for _, s := range scores {
			if s > t-w && s <= t {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

func TestPeakMatchesEveryWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 5000 {
		w := int64(1 + rng.IntN(30))
		scores := make([]int64, rng.IntN(20))
		for i := range scores {
			scores[i] = int64(rng.IntN(100))
		}
		slices.Sort(scores)
		g := int64(rng.IntN(100))
		if got, want := Peak(scores, g, w), peakByEveryT(scores, g, w); got != want {
			t.Fatalf("iter %d: Peak(%v, %d, %d) = %d, want %d", iter, scores, g, w, got, want)
		}
	}
}

func FuzzPeak(f *testing.F) {
	f.Add([]byte{1, 5, 9, 30, 31, 32}, uint8(7), uint8(10))
	f.Fuzz(func(t *testing.T, raw []byte, g8, w8 uint8) {
		scores := make([]int64, len(raw))
		for i, b := range raw {
			scores[i] = int64(b)
		}
		slices.Sort(scores)
		g, w := int64(g8), 1+int64(w8)
		if got, want := Peak(scores, g, w), peakByEveryT(scores, g, w); got != want {
			t.Fatalf("Peak(%v, %d, %d) = %d, want %d", scores, g, w, got, want)
		}
	})
}
