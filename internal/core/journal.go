package core

import (
	"slices"
)

// Journal holds a process's own admissions for as long as they count in
// the longest window (W, µs), at most Cap of them, in the order they were
// added. Its newest entry is the probe every round trip checks is still in
// that window's key, which tells a failover that lost the latest writes (see
// the throttler's heal.go). It is not safe for concurrent use.
type Journal struct {
	Entries []Entry
	Cap     int      // twice the longest window's limit
	W       int64    // the longest window: entries older than it are trimmed from its key
	seqs    []uint64 // per entry, how many were added before it
	added   uint64   // entries ever added
}

// Add records members admitted at score.
func (j *Journal) Add(score int64, members []string) {
	for _, m := range members {
		j.Entries = append(j.Entries, Entry{Score: score, Member: m})
		j.seqs = append(j.seqs, j.added)
		j.added++
	}
	if over := len(j.Entries) - j.Cap; over > 0 {
		j.drop(0, over)
	}
}

// Trim forgets admissions no window counts any longer.
func (j *Journal) Trim(serverNow int64) {
	i := 0
	for i < len(j.Entries) && j.Entries[i].Score <= serverNow-j.W {
		i++
	}
	j.drop(0, i)
}

// Forget drops members given back (their calls were not made).
func (j *Journal) Forget(members []string) {
	if len(members) == 0 {
		return
	}
	kept := 0
	for i, e := range j.Entries {
		if !slices.Contains(members, e.Member) {
			j.Entries[kept], j.seqs[kept] = e, j.seqs[i]
			kept++
		}
	}
	j.drop(kept, len(j.Entries))
}

// Clear forgets every admission (Redis lost them all).
func (j *Journal) Clear() { j.drop(0, len(j.Entries)) }

// drop removes entries i to k-1.
func (j *Journal) drop(i, k int) {
	j.Entries = slices.Delete(j.Entries, i, k)
	j.seqs = slices.Delete(j.seqs, i, k)
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

// Mark is how many entries were ever added: ProbeBefore(Mark()) finds only
// entries added before this call.
func (j *Journal) Mark() uint64 { return j.added }

// ProbeBefore returns the newest journaled member added before mark (see
// Mark), and its score.
func (j *Journal) ProbeBefore(mark uint64) (Entry, bool) {
	i, _ := slices.BinarySearch(j.seqs, mark)
	if i == 0 {
		return Entry{}, false
	}
	return j.Entries[i-1], true
}
