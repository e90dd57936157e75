package redisstore

import (
	"strconv"
	"strings"

	"github.com/go-throttler/throttler/internal/core"
	"github.com/redis/go-redis/v9"
)

// HashTag returns the part of key that Redis Cluster hashes: the text
// between the first '{' and the next '}' when it is not empty, else the
// whole key.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// NewsChannel is the channel news about the quota at key is published on:
// the key's own name.
func NewsChannel(key string) string { return key }

// exclusive formats an exclusive score bound, "(v".
func exclusive(v int64) string {
	var b [24]byte
	return string(strconv.AppendInt(append(b[:0], '('), v, 10))
}

// itoa formats an inclusive score bound.
func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// toAny converts members to the arguments go-redis takes.
func toAny(members []string) []any {
	args := make([]any, len(members))
	for i, m := range members {
		args[i] = m
	}
	return args
}

// entryMembers returns the members of es as ZREM's arguments.
func entryMembers(es []core.Entry) []any {
	args := make([]any, len(es))
	for i, e := range es {
		args[i] = e.Member
	}
	return args
}

// zEntries converts a ZRANGE WITHSCORES reply to entries.
func zEntries(zs []redis.Z) []core.Entry {
	out := make([]core.Entry, len(zs))
	for i, z := range zs {
		m, _ := z.Member.(string)
		out[i] = core.Entry{Score: int64(z.Score), Member: m}
	}
	return out
}
