package core

// Meta is what the first limit's key keeps beside its calls, as read: a
// shared pause's end, and a lowered first limit with its end, in server
// µs (0 = none).
type Meta struct {
	Pause, Limit, LimitEnd int64
}

// LimitAt returns the first limit in force at server time now: limit,
// or the lowered one while it lasts and is lower.
func (m Meta) LimitAt(now int64, limit int) int {
	if m.Limit > 0 && m.LimitEnd > now && m.Limit < int64(limit) {
		return int(m.Limit)
	}
	return limit
}

// MetaWrite is a change to what the first limit's key keeps beside its
// calls. Zero fields leave what they name as it is.
type MetaWrite struct {
	// Pause: no call may go before this server time (µs). A later pause
	// already in force is kept.
	Pause int64
	// Limit: the first limit is lowered to Limit until LimitEnd (server
	// µs). ClearLimit ends a lowering instead.
	Limit, LimitEnd int64
	ClearLimit      bool
	// Backoff: the last back-off from a refusal that gave no end lasted
	// Backoff µs and ends at BackoffEnd (server µs).
	Backoff, BackoffEnd int64
	// News, when set, is published to every replica listening, once the
	// change is written.
	News *News
}

// Empty reports whether m changes nothing.
func (m MetaWrite) Empty() bool {
	return m.Pause == 0 && m.Limit == 0 && !m.ClearLimit && m.Backoff == 0
}
