package core

// Entry is a member of the sorted set with its score, ordered as Redis orders
// them: by score, then by the member's bytes.
type Entry struct {
	Score  int64
	Member string
}

// Less reports whether a sorts before b.
func (a Entry) Less(b Entry) bool {
	if a.Score != b.Score {
		return a.Score < b.Score
	}
	return a.Member < b.Member
}
