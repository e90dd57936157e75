package sim

import (
	"math/rand/v2"
	"time"
)

// Scales names the fixed scenarios whose figures docs/simulator.md gives: sizes
// the real-time harness cannot reach on a small machine.
var Scales = []string{"hour", "herd", "herd-faults", "herd3"}

// Scale returns the named fixed scenario:
//
//   - hour: 50 replicas x 20 callers on 5000 per hour, for 10 hours;
//   - herd: 24 replicas x 25 callers on 100 per second, for 2 minutes;
//   - herd3: 3 replicas x 300 callers on 50 per second, for 2 minutes (the
//     bench harness's herd);
//   - herd-faults: the herd with replica clocks up to 1s apart and one of
//     each fault: a reply delay, dropped connections both ways, a stall, a
//     clock step, a flush, a failover to a copy 300ms behind, a kill.
//
// Each uses the library's defaults (50ms buffer, reserve-ahead, FailClosed,
// clients without ContextTimeoutEnabled) and 1ms round trips.
func Scale(name string) (Scenario, bool) {
	s := Scenario{Seed: 1, Ahead: -1, Buffer: 50 * time.Millisecond, Policy: FailClosed,
		MaxN: 1, Latency: time.Millisecond}
	switch name {
	case "hour":
		s.Replicas, s.Goroutines = 50, 20
		s.Limits = []Limit{{Key: "{sim}:a", Limit: 5000, Interval: time.Hour}}
		s.Run = 10 * time.Hour
	case "herd", "herd-faults":
		s.Replicas, s.Goroutines = 24, 25
		s.Limits = []Limit{{Key: "{sim}:a", Limit: 100, Interval: time.Second}}
		s.Run = 2 * time.Minute
	case "herd3":
		s.Replicas, s.Goroutines = 3, 300
		s.Limits = []Limit{{Key: "{sim}:a", Limit: 50, Interval: time.Second}}
		s.Run = 2 * time.Minute
	default:
		return Scenario{}, false
	}
	s.CtxClient = make([]bool, s.Replicas)
	s.Skew = make([]time.Duration, s.Replicas)
	if name == "herd-faults" {
		r := rand.New(rand.NewPCG(1, 2))
		for i := range s.Skew {
			s.Skew[i] = time.Duration(r.Int64N(int64(2*time.Second))) - time.Second
		}
		s.Faults = []Fault{
			{At: 15 * time.Second, Kind: Delay, Replica: 3, D: 300 * time.Millisecond, Span: 2 * time.Second},
			{At: 25 * time.Second, Kind: DropBefore, Replica: 5, K: 3},
			{At: 35 * time.Second, Kind: DropAfter, Replica: 7, K: 3},
			{At: 45 * time.Second, Kind: Stall, D: 500 * time.Millisecond},
			{At: 55 * time.Second, Kind: ClockStep, Replica: 9, D: 2 * time.Second},
			{At: 65 * time.Second, Kind: Flush},
			{At: 80 * time.Second, Kind: Failover, Lag: 300 * time.Millisecond},
			{At: 95 * time.Second, Kind: Kill, Replica: 11},
		}
	}
	return s, true
}
