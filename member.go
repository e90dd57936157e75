package throttler

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/google/uuid"
)

// memberLen is the size of a member in bytes. Redis 7 stores a sorted-set
// member of up to 14 bytes in its smallest string allocation (16 bytes), so
// 14 is as unique as a member can get for the least memory; a 36-character
// UUID string costs two size classes more.
const memberLen = 14

// memberSource makes the members a Throttler adds: the first 10 bytes of a
// version 4 UUID drawn once per Throttler, then a 32-bit call counter.
// Members are unique per call for as long as one can matter (a member lives
// a few intervals at most; the counter wraps after 2^32 calls). Those 10
// bytes carry 74 random bits (6 of the 80 are the UUID's version and
// variant), so two Throttlers share a prefix with probability 2^-74, and
// among a million Throttlers alive at once some two do with probability
// under 2^-35.
type memberSource struct {
	prefix [10]byte
	n      atomic.Uint32
}

func newMemberSource() *memberSource {
	id := uuid.New()
	s := &memberSource{}
	copy(s.prefix[:], id[:])
	return s
}

// id names the process's Throttler: its members' common prefix.
func (s *memberSource) id() string { return string(s.prefix[:]) }

func (s *memberSource) next() string {
	var b [memberLen]byte
	copy(b[:], s.prefix[:])
	binary.BigEndian.PutUint32(b[10:], s.n.Add(1))
	return string(b[:])
}
