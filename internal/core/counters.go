package core

// CountersRead is what a Transport reads of the shared window before it
// follows an API's counter or backs off, in one round trip.
type CountersRead struct {
	Used                int   // units scored within the range asked for, in the first key
	Limit, LimitEnd     int64 // the lowered first limit and its end (server µs); 0 = none
	Backoff, BackoffEnd int64 // the last back-off's length and end (server µs); 0 = none
}

// CountersApply is a batch of readings of an API's counter to apply to the
// shared limit in one step (a store applies it atomically), with what the
// step needs.
type CountersApply struct {
	Limit    int    // New's first limit
	Gradual  bool   // the counter frees calls as they age
	Interval int64  // the first limit's interval (µs)
	Tol      int64  // readings whose resets lie this close (µs) are of one reset
	MaxFor   int64  // the longest a lowering lasts from now (µs)
	TTL      int64  // the key's TTL at least, when a lowering is written (ms)
	Channel  string // where a change is published as news
	// The readings, in the order their responses were read.
	Readings []CountersReading
}

// CountersReading is one response's counter, in server µs: the calls of
// ours scored in (From, To] are those the API had counted, and it had
// Remaining more before Reset; Windows > 1 spreads Remaining over that
// many windows of ours instead (a reset further than one).
type CountersReading struct {
	From, To, Reset int64
	Remaining       int
	Windows         int64
}

// CountersApplied is the limit in force once a batch was applied (0 =
// none) and its end, and the latest reset before which a reading left
// nothing at all (0 = none): the caller pauses until then.
type CountersApplied struct {
	Limit          int
	End, ZeroUntil int64
}
