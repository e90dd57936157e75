package core

import (
	"fmt"
	"testing"
)

// BenchmarkAdmit and BenchmarkNextSlots: the window arithmetic of one round
// trip, without I/O.
func BenchmarkAdmit(b *testing.B) {
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprint("claims=", n), func(b *testing.B) {
			claims := make([]Claim, n)
			checks := make([]int64, n)
			counts := make([]int64, n)
			for i := range claims {
				claims[i] = Claim{Score: int64(i * 10), N: 1}
				checks[i] = int64(i * 10)
				counts[i] = int64(n)
			}
			b.ReportAllocs()
			for b.Loop() {
				admit(claims, checks, counts, nil, capsOf(1000), 1000, nil)
			}
		})
	}
}

func BenchmarkNextSlots(b *testing.B) {
	const limit, k = 5000, 64
	tail := make([]Entry, k+8)
	for i := range tail {
		tail[i] = Entry{Score: int64(i * 100), Member: fmt.Sprint(i)}
	}
	dropped := tail[k : k+8]
	b.ReportAllocs()
	for b.Loop() {
		nextSlots(tail, dropped, limit, k, 8, 1_000_000)
	}
}
