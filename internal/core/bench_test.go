package core

import (
	"fmt"
	"slices"
	"testing"
	"time"
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

// BenchmarkPlanCappedQueue plans a round behind a capped flood, as in the
// bench's tenants-flood: a light tenant's call at the head of the queue,
// 30 calls of the flood behind it, the flood holding its cap of 80 in the
// window (half of them this process's), none of its calls within reach.
// The light call's round trip waits for this planning.
func BenchmarkPlanCappedQueue(b *testing.B) {
	c := testConfig(100, time.Second, time.Second)
	in := planAt(100)
	w := c.Wins[0].W
	var m TenantMembers
	for i := range 80 {
		s := 1_001_000 - w + 30_000 + int64(i)*(w-30_000)/80 // the first leaves 30ms on
		if i%2 == 0 {
			m.Own = append(m.Own, s)
		} else {
			m.Others = append(m.Others, s)
		}
	}
	m.Procs = 3
	in.Known = Known{Tenants: TenantShares{
		TenantReach: TenantReach{Ahead: 20_000, Yield: 50_000}, Level: 80, Until: in.Now.Add(time.Second),
		Capped: map[string]bool{"a": true},
		Scores: map[string]TenantMembers{"a": m},
	}}
	reqs := append([]Request{{N: 1, Prio: Normal, Tenant: "b"}}, slices.Repeat([]Request{{N: 1, Prio: Normal, Tenant: "a"}}, 30)...)
	var out PlanOut
	b.ReportAllocs()
	for b.Loop() {
		out = Plan(c, in, reqs, out)
	}
	if out.Each[0].Action != Take || out.Each[1].Action != Keep {
		b.Fatalf("the light call %+v, the flood's first %+v: want the light claimed, the flood kept", out.Each[0], out.Each[1])
	}
}
