package core

import "time"

// Window is one limit a Throttler enforces: a sorted set in which no window
// of w microseconds (interval + buffer) holds more than limit members.
type Window struct {
	Key      string
	Limit    int
	Interval time.Duration
	W        int64
}

// InFlight is WithInFlight's bound: at most N calls in flight at once
// across every process, each place held in a lease at Key that expires
// after TTL unless renewed.
type InFlight struct {
	Key string
	N   int
	TTL time.Duration
}

// TrimSlack keeps members a second past their window before trimming, so
// that a client whose server-time estimate runs ahead by less than that
// never trims a member another still counts.
const TrimSlack = int64(time.Second / time.Microsecond)

// FutureBound is how far past the server's now a member's score can lie
// when a Throttler wrote it: WithReserveAhead is capped well below it. A
// member beyond it (garbage) is ignored when free slots and Usage are
// worked out, and removed by the next trim; until then the count of a
// window of about an hour or longer holds it.
const FutureBound = int64(time.Hour / time.Microsecond)

// DebtPrefix starts the members a Settle adds as debt, so that Usage can
// tell them from calls (they count the same).
const DebtPrefix = "\x00d"

// Peak is the most of scores (ascending) in any one window (t-w, t] that
// holds g, that is with g <= t < g+w: what PeakScript computes in Redis
// for an exact attempt (see Reply.Peaks). Such a window holds the most at
// t = g or at a score, and both its ends only move forward as t does.
func Peak(scores []int64, g, w int64) int64 {
	var peak int64
	lo, hi := 0, 0 // the window's scores are scores[lo:hi]
	at := func(t int64) {
		for hi < len(scores) && scores[hi] <= t {
			hi++
		}
		for lo < hi && scores[lo] <= t-w {
			lo++
		}
		peak = max(peak, int64(hi-lo))
	}
	at(g)
	for _, s := range scores {
		if s > g && s < g+w {
			at(s)
		}
	}
	return peak
}
