package throttler

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
)

// Route returns a Transport.Route that sends each request through the
// Throttler of the key keyOf gives for it (see For), so that each
// credential's requests share its own quota across every replica.
//
// A request keyOf gives no key for (ok false) goes unthrottled, as the
// Transport sends every request Route gives no Throttler for; to throttle
// those too, route them to a Throttler of your own (see
// ExampleGroup_Route). A request whose Throttler For cannot make (the
// limits function failed, or New refused its KeyQuota) goes unthrottled as
// well, and the failure is logged (see WithGroupLogger), naming the key
// only by its digest: make the limits function give a default KeyQuota
// rather than fail when requests must never go unthrottled.
func (g *Group) Route(keyOf func(*http.Request) (key string, ok bool)) func(*http.Request) *Throttler {
	return func(req *http.Request) *Throttler {
		key, ok := keyOf(req)
		if !ok {
			return nil
		}
		t, err := g.For(key)
		if err != nil {
			g.logOnce("throttler: request sent unthrottled: no Throttler for its key",
				slog.String("key", g.redisKey(idOf(key))), slog.Any("err", err))
			return nil
		}
		return t
	}
}

// ByHeader returns a key function for Group.Route that keys a request by
// the value of its header name (http.Header.Get: the name in any case,
// the header's first value): the key is the SHA-256 digest of that value,
// its first 16 bytes in 32 hex digits, and a request without the header,
// or whose first value is empty, has no key, and goes unthrottled (see
// Route). Use it for a secret, such as an API key or an Authorization
// header (its whole value, the scheme included, is digested): the value
// itself is never kept, logged or sent to Redis, and the limits function
// sees only its digest. The digest is not keyed: a value that can be
// guessed (a shop's domain, a customer number) can be found again from it
// by anyone who reads Redis; a high-entropy token cannot.
func ByHeader(name string) func(*http.Request) (key string, ok bool) {
	return func(req *http.Request) (string, bool) {
		v := req.Header.Get(name)
		if v == "" {
			return "", false
		}
		sum := sha256.Sum256([]byte(v))
		return hex.EncodeToString(sum[:16]), true
	}
}
