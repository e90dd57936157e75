// Package throttlertest gives the tests of code that uses a Throttler a
// Redis of their own, with no server to install and no port to open: an
// embedded Redis (miniredis) served over in-memory connections.
//
// Inside a testing/synctest bubble (Go 1.25), time is virtual: a test of
// code that waits an hour for quota finishes at once, and the same way on
// every run. Call NewRedis (or New) inside the bubble, so that the embedded
// Redis's clock, its connections and the Throttler's timers all belong to
// it:
//
//	func TestSyncWaitsForQuota(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			th := throttlertest.New(t, 100, time.Hour)
//			start := time.Now()
//			syncAll(t.Context(), th, 150) // the code under test: 150 calls
//			if waited := time.Since(start); waited < time.Hour {
//				t.Errorf("150 calls at 100 an hour took %s", waited)
//			}
//		})
//	}
//
// time.Since reads the bubble's clock: the test sees the hour pass, and its
// wall time is milliseconds (see the package's TestSyncAllWaitsPastAWindow).
//
// Without synctest, the same helpers work in real time, as a real Redis
// would: keep the windows of such a test short (a limit of 5 per 100ms
// rather than 180,000 per hour), or use a Throttler's Allow, which never
// waits.
//
// Several replicas of a service share one Redis: take a client for each
// from one Redis (Redis.Client) and make each replica's Throttler on the
// same key.
package throttlertest

import (
	"context"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/memconn"
	"github.com/go-throttler/throttler/internal/testhook"
	"github.com/redis/go-redis/v9"
)

// TB is what the helpers need of a test: a *testing.T or *testing.B
// (testing.TB), or anything that registers cleanups and reports failures.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Redis is an embedded Redis for one test: a miniredis whose clients reach
// it over in-memory connections, and whose clock (TIME, key TTLs) is the
// process's, or the bubble's inside a testing/synctest bubble.
type Redis struct {
	t TB
	m *miniredis.Miniredis
}

// NewRedis starts an embedded Redis for t, stopped (with its clients
// closed) when t ends. Inside a testing/synctest bubble, call it inside
// the bubble.
func NewRedis(t TB) *Redis {
	t.Helper()
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true) // TTLs run on the clock, virtual in a bubble
	// The first dial starts its server, which then serves the in-memory
	// connections; it listens on loopback but nothing dials it there.
	c, err := m.Dial()
	if err != nil {
		t.Fatalf("throttlertest: starting the embedded Redis: %v", err)
	}
	c.Close()
	r := &Redis{t: t, m: m}
	t.Cleanup(m.Close)
	return r
}

// Client returns a new client of r, as each replica of a service has its
// own, closed when the test ends (before r stops).
func (r *Redis) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{
		// An IP literal: go-redis would resolve a host name, and a DNS
		// lookup cannot run in a synctest bubble. The Dialer ignores it.
		Addr: "127.0.0.1:6379",
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			client, server := memconn.Pair()
			r.m.Server().ServeConn(server)
			return client, nil
		},
		ContextTimeoutEnabled: true,
		DisableIdentity:       true, // no CLIENT SETINFO: miniredis has no use for it
	})
	r.t.Cleanup(func() { c.Close() })
	return c
}

// Miniredis returns the embedded server, to read or change what it holds
// (its keys, their TTLs) or to make it fail (SetError).
func (r *Redis) Miniredis() *miniredis.Miniredis { return r.m }

// Key is the key New's Throttlers use.
const Key = "throttlertest"

// New returns a Throttler of limit calls per interval on a new embedded
// Redis (NewRedis), with opts, for t: the quota of one replica, whatever
// the test's name. It fails t if New refuses the arguments. Inside a
// testing/synctest bubble, call it inside the bubble.
func New(t TB, limit int, interval time.Duration, opts ...throttler.Option) *throttler.Throttler {
	t.Helper()
	return NewRedis(t).Throttler(limit, interval, opts...)
}

// Throttler returns a new Throttler of limit calls per interval on r's Key,
// with a client of its own, as one more replica sharing the quota: every
// Throttler r makes holds to one limit. It fails the test if New refuses
// the arguments.
func (r *Redis) Throttler(limit int, interval time.Duration, opts ...throttler.Option) *throttler.Throttler {
	r.t.Helper()
	th, err := throttler.New(r.Client(), Key, limit, interval, opts...)
	if err != nil {
		r.t.Fatalf("throttlertest: %v", err)
	}
	// Registered after its client's Close, so run before it.
	r.t.Cleanup(func() { settle(r.t, th) })
	return th
}

// settleWithin is how long settle waits for a Throttler's goroutines.
const settleWithin = 10 * time.Second

// settle waits until th runs no goroutine (its worker, and its news
// listener, which lingers 250ms after the last call), so that a test ends
// with none left: a synctest bubble fails on a goroutine still waiting
// when its function has returned, as goleak does on one still running.
// In a bubble the wait is virtual.
func settle(t TB, th *throttler.Throttler) {
	deadline := time.Now().Add(settleWithin)
	for !testhook.Idle(th) {
		if time.Now().After(deadline) {
			t.Errorf("throttlertest: the Throttler still runs a goroutine %s after the test", settleWithin)
			return
		}
		time.Sleep(time.Millisecond)
	}
}
