package throttler

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync/atomic"
)

// prefixLen is how many random bytes start every member a Throttler adds.
const prefixLen = 8

// memberSource makes the members a Throttler adds: 8 random bytes drawn
// once per Throttler, then the number of the call, counted from 1, as an
// unsigned varint (1 byte below 128, 2 below 16,384, 3 below 2^21, ...).
//
// A member must be unique among the members of its key for as long as it
// can matter: two calls under one member would count once. The number
// never repeats within a Throttler (it does not wrap), and its varint is
// a prefix-free code, so members of one prefix differ; members of two
// Throttlers differ unless their 64 random bits are the same, which for
// any two happens with probability 2^-64 (for the 100 Throttlers of a
// key, some two share a prefix with probability under 3×10^-16).
//
// What each byte buys: a member is stored as it is, once per call in the
// window. In a small key (a listpack) the entry takes 2 bytes beside the
// member, and its score 10; a member of 9 bytes (a call numbered below
// 128) saves 5 a call against the 14 of a fixed 10-byte prefix and 32-bit
// counter, a quarter of what a call costs there. In a large key (a
// skiplist) a member of up to 14 bytes fits Redis's smallest string
// allocation, as do those of a Throttler's first 2^42 calls.
type memberSource struct {
	prefix [prefixLen]byte
	n      atomic.Uint64
}

func newMemberSource() *memberSource {
	s := &memberSource{}
	rand.Read(s.prefix[:]) // never fails (see crypto/rand.Read)
	return s
}

// id names the process's Throttler: its members' common prefix.
func (s *memberSource) id() string { return string(s.prefix[:]) }

// name is id in hex, as the news the Throttler publishes names it (see
// redisstore.Store.Name).
func (s *memberSource) name() string { return hex.EncodeToString(s.prefix[:]) }

func (s *memberSource) next() string {
	var b [prefixLen + binary.MaxVarintLen64]byte
	copy(b[:], s.prefix[:])
	return string(binary.AppendUvarint(b[:prefixLen], s.n.Add(1)))
}
