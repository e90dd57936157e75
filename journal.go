package throttler

import (
	"slices"

	"github.com/go-throttler/throttler/internal/core"
)

// journal holds this Throttler's own admissions for as long as they count in
// the longest window. Its newest entry is the probe every round trip checks
// is still in that window's key, which tells a failover that lost the
// latest writes (see heal.go). Guarded by the Throttler's mu.
type journal struct {
	entries []core.Entry
	cap     int   // twice the longest window's limit
	w       int64 // the longest window: entries older than it are trimmed from its key
}

// add records members admitted at score.
func (j *journal) add(score int64, members []string) {
	for _, m := range members {
		j.entries = append(j.entries, core.Entry{Score: score, Member: m})
	}
	if over := len(j.entries) - j.cap; over > 0 {
		j.entries = slices.Delete(j.entries, 0, over)
	}
}

// trim forgets admissions no window counts any longer.
func (j *journal) trim(serverNow int64) {
	i := 0
	for i < len(j.entries) && j.entries[i].Score <= serverNow-j.w {
		i++
	}
	j.entries = slices.Delete(j.entries, 0, i)
}

// forget drops members given back (their calls were not made).
func (j *journal) forget(members []string) {
	if len(members) == 0 {
		return
	}
	j.entries = slices.DeleteFunc(j.entries, func(e core.Entry) bool { return slices.Contains(members, e.Member) })
}

// holds reports whether member is journaled: an admission of ours that
// still counts and was not given back.
func (j *journal) holds(member string) bool {
	return slices.ContainsFunc(j.entries, func(e core.Entry) bool { return e.Member == member })
}

// probe returns the newest journaled member, which must be in the set.
func (j *journal) probe() (string, bool) {
	if len(j.entries) == 0 {
		return "", false
	}
	return j.entries[len(j.entries)-1].Member, true
}
