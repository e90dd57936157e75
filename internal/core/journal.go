package core

import (
	"slices"
)

// Journal holds a process's own admissions for as long as they count in
// the longest window (W, µs), at most Cap of them. Its newest entry is the
// probe every round trip checks is still in that window's key, which tells
// a failover that lost the latest writes (see the throttler's heal.go). It
// is not safe for concurrent use.
type Journal struct {
	Entries []Entry
	Cap     int   // twice the longest window's limit
	W       int64 // the longest window: entries older than it are trimmed from its key
}

// Add records members admitted at score.
func (j *Journal) Add(score int64, members []string) {
	for _, m := range members {
		j.Entries = append(j.Entries, Entry{Score: score, Member: m})
	}
	if over := len(j.Entries) - j.Cap; over > 0 {
		j.Entries = slices.Delete(j.Entries, 0, over)
	}
}

// Trim forgets admissions no window counts any longer.
func (j *Journal) Trim(serverNow int64) {
	i := 0
	for i < len(j.Entries) && j.Entries[i].Score <= serverNow-j.W {
		i++
	}
	j.Entries = slices.Delete(j.Entries, 0, i)
}

// Forget drops members given back (their calls were not made).
func (j *Journal) Forget(members []string) {
	if len(members) == 0 {
		return
	}
	j.Entries = slices.DeleteFunc(j.Entries, func(e Entry) bool { return slices.Contains(members, e.Member) })
}

// Holds reports whether member is journaled: an admission of ours that
// still counts and was not given back.
func (j *Journal) Holds(member string) bool {
	return slices.ContainsFunc(j.Entries, func(e Entry) bool { return e.Member == member })
}

// Probe returns the newest journaled member, which must be in the set (or,
// in a compacted window, in its bucket), and its score.
func (j *Journal) Probe() (Entry, bool) {
	if len(j.Entries) == 0 {
		return Entry{}, false
	}
	return j.Entries[len(j.Entries)-1], true
}
