package sim

import (
	"maps"
	"net"
	"sort"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/memconn"
)

// Store is the simulated Redis: a miniredis served over in-memory
// connections (see memconn.Pair),
// whose clock (TIME, key TTLs) is the bubble's virtual clock, and the faults
// that live inside Redis: losing every key (a restart empty, a flush) and
// failing over to a copy that missed the last writes.
type Store struct {
	m *miniredis.Miniredis
}

// NewStore starts a store. Call it inside the bubble.
func NewStore() *Store {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true) // TTLs run on the (virtual) clock
	return &Store{m: m}
}

// Close stops the store and its connections.
func (s *Store) Close() { s.m.Close() }

func (s *Store) dial() (net.Conn, error) {
	if s.m.Server() == nil {
		// The first dial starts the server.
		c, err := s.m.Dial()
		if err != nil {
			return nil, err
		}
		c.Close()
	}
	client, server := memconn.Pair()
	s.m.Server().ServeConn(server)
	return client, nil
}

// Flush loses every key, as a Redis restarted without persistence does.
func (s *Store) Flush() { s.m.FlushAll() }

// Snapshot is a copy of the store's sorted sets and hashes and their TTLs.
type Snapshot struct {
	keys map[string]snapKey
}

type snapKey struct {
	members map[string]float64 // a sorted set's
	fields  map[string]string  // a hash's
	ttl     time.Duration
}

// Snapshot copies the sorted sets and the hashes (the types a Throttler
// writes: a compacted window keeps its buckets in a hash).
func (s *Store) Snapshot() Snapshot {
	snap := Snapshot{keys: map[string]snapKey{}}
	for _, k := range s.m.Keys() {
		var v snapKey
		var err error
		switch s.m.Type(k) {
		case "zset":
			// miniredis hands out its own map: a copy keeps the set
			// as it is now.
			v.members, err = s.m.SortedSet(k)
			v.members = maps.Clone(v.members)
		case "hash":
			v.fields = map[string]string{}
			var fields []string
			fields, err = s.m.HKeys(k)
			for _, f := range fields {
				v.fields[f] = s.m.HGet(k, f)
			}
		default:
			continue
		}
		if err != nil {
			continue
		}
		v.ttl = s.m.TTL(k)
		snap.keys[k] = v
	}
	return snap
}

// Restore replaces the store's data with snap, as a failover to a replica
// that last synced when snap was taken does.
func (s *Store) Restore(snap Snapshot) {
	s.m.FlushAll()
	for k, v := range snap.keys {
		for m, score := range v.members {
			s.m.ZAdd(k, score, m)
		}
		for f, val := range v.fields {
			s.m.HSet(k, f, val)
		}
		if v.ttl > 0 {
			s.m.SetTTL(k, v.ttl)
		}
	}
}

// Member is one sorted-set member.
type Member struct {
	Name  string
	Score float64
}

// Members returns key's members by score; none when the key is gone.
func (s *Store) Members(key string) []Member {
	ms, err := s.m.SortedSet(key)
	if err != nil {
		return nil
	}
	out := make([]Member, 0, len(ms))
	for m, score := range ms {
		out = append(out, Member{m, score})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Score < out[j].Score })
	return out
}

// Exists reports whether key is in the store (an expired key is not).
func (s *Store) Exists(key string) bool { return s.m.Exists(key) }

// TTL is key's time to live; zero when it has none or is gone.
func (s *Store) TTL(key string) time.Duration { return s.m.TTL(key) }
