package throttlergrpc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"

	"github.com/go-throttler/throttler"
	"google.golang.org/grpc/metadata"
)

// Route picks the Throttler a call waits on, from its context and its
// full method name ("/package.Service/Method"). A nil Throttler with a
// nil error sends the call unthrottled; an error fails the call, unsent
// (its gRPC code is InvalidArgument when the error wraps
// throttler.ErrInvalidArgument, Unavailable otherwise). A Route is called
// once per call (not per retry), on the caller's goroutine: it must be
// safe for concurrent use, and quick.
type Route func(ctx context.Context, method string) (*throttler.Throttler, error)

// Throttler returns a Route that sends every call through t. A nil t, or
// one New did not make, fails every call with an error wrapping
// throttler.ErrInvalidArgument (rather than send them all unthrottled).
func Throttler(t *throttler.Throttler) Route {
	if !usable(t) {
		err := invalidf("Throttler: the Throttler is nil or was not made by throttler.New")
		return func(context.Context, string) (*throttler.Throttler, error) { return nil, err }
	}
	return func(context.Context, string) (*throttler.Throttler, error) { return t, nil }
}

// ByMethod returns a Route that picks the Throttler by the call's method:
// a key is a full method name ("/package.Service/Method"), or a service
// followed by a slash ("/package.Service/"), which covers the methods of
// that service that have no key of their own. Calls to other methods go
// unthrottled. A key whose Throttler is nil, or was not made by New,
// fails its calls with an error wrapping throttler.ErrInvalidArgument.
// The map is copied: later changes to it do not count.
func ByMethod(throttlers map[string]*throttler.Throttler) Route {
	m := maps.Clone(throttlers)
	return func(_ context.Context, method string) (*throttler.Throttler, error) {
		key := method
		t, ok := m[key]
		if !ok {
			i := strings.LastIndexByte(method, '/')
			if i <= 0 {
				return nil, nil
			}
			key = method[:i+1]
			if t, ok = m[key]; !ok {
				return nil, nil
			}
		}
		if !usable(t) {
			return nil, invalidf("ByMethod: the Throttler for %q is nil or was not made by throttler.New", key)
		}
		return t, nil
	}
}

// GroupRoute returns a Route that sends each call through the Throttler of
// the key keyOf gives it (see throttler.Group.For), so that each
// credential's calls share its own quota across every replica. A call
// keyOf gives no key for (ok false) goes unthrottled. A call whose
// Throttler For cannot make (an empty key, a limits function that failed,
// a KeyQuota New refused) fails, unsent, with For's error: unlike
// throttler.Group.Route, which sends such a request unthrottled and logs,
// a call here is never sent past its quota; make the limits function give
// a default KeyQuota if such calls should go. A nil g or keyOf fails every
// call with an error wrapping throttler.ErrInvalidArgument.
func GroupRoute(g *throttler.Group, keyOf func(ctx context.Context, method string) (key string, ok bool)) Route {
	if g == nil || keyOf == nil {
		err := invalidf("GroupRoute: the Group or keyOf is nil")
		return func(context.Context, string) (*throttler.Throttler, error) { return nil, err }
	}
	return func(ctx context.Context, method string) (*throttler.Throttler, error) {
		key, ok := keyOf(ctx, method)
		if !ok {
			return nil, nil
		}
		t, err := g.For(key)
		if err != nil {
			return nil, fmt.Errorf("GroupRoute: no Throttler for the call's key: %w", err)
		}
		return t, nil
	}
}

// ByMetadata returns a key function for GroupRoute that keys a call by
// the first value of its outgoing metadata entry name (as set by
// metadata.AppendToOutgoingContext or metadata.NewOutgoingContext; name in
// any case): the key is the SHA-256 digest of that value, its first 16
// bytes in 32 hex digits, so that a secret such as an API key is never
// kept, logged or sent to Redis; a call without the entry, or whose first
// value is empty, has no key and goes unthrottled. The digest is not
// keyed: a value that can be guessed can be found again from it by anyone
// who reads Redis; a high-entropy token cannot.
//
// Credentials a grpc.PerRPCCredentials adds (grpc.WithPerRPCCredentials,
// oauth tokens) are not in the outgoing metadata an interceptor sees: they
// are added after it, in the transport. Key such calls by something the
// context carries instead.
func ByMetadata(name string) func(ctx context.Context, method string) (key string, ok bool) {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, bool) {
		md, _ := metadata.FromOutgoingContext(ctx)
		v := md.Get(name)
		if len(v) == 0 || v[0] == "" {
			return "", false
		}
		sum := sha256.Sum256([]byte(v[0]))
		return hex.EncodeToString(sum[:16]), true
	}
}

// usable reports whether t was made by New: a nil or zero Throttler has
// no key.
func usable(t *throttler.Throttler) bool {
	return t != nil && t.Key() != ""
}
