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
// member beyond it (a seed-design "pending" score a year ahead, or garbage)
// counts in no window; it is trimmed with the expired ones.
const FutureBound = int64(time.Hour / time.Microsecond)

// DebtPrefix starts the members a Settle adds as debt, so that Usage can
// tell them from calls (they count the same).
const DebtPrefix = "\x00d"
