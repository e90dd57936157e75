package throttler

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// goroutineHook notes, for every command and pipeline the client runs,
// whether it runs on a goroutine that a Throttler method called the store
// from, rather than on a helper goroutine the store started for it.
type goroutineHook struct {
	mu      sync.Mutex
	inline  int
	handOff int
}

func (h *goroutineHook) note() {
	buf := make([]byte, 64<<10)
	stack := string(buf[:runtime.Stack(buf, false)])
	h.mu.Lock()
	defer h.mu.Unlock()
	if strings.Contains(stack, "throttler.(*Throttler).") {
		h.inline++
	} else {
		h.handOff++
	}
}

func (h *goroutineHook) counts() (inline, handOff int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inline, h.handOff
}

func (h *goroutineHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *goroutineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note()
		return next(ctx, cmd)
	}
}

func (h *goroutineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note()
		return next(ctx, cmds)
	}
}

// The common path makes no goroutine hand-off where the client itself ends
// a round trip by its deadline: with ContextTimeoutEnabled, or with read
// and write timeouts within the Redis timeout. Where it does not (go-redis's
// default timeouts, or a Redis timeout shorter than the client's), every
// round trip goes through a helper goroutine, so that the Redis timeout
// holds.
func TestRoundTripsInline(t *testing.T) {
	cases := []struct {
		name      string
		configure func(*redis.Options)
		opts      []Option
		inline    bool
	}{
		{"ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }, nil, true},
		{"timeouts equal to the bound", func(o *redis.Options) { o.ReadTimeout = time.Second }, nil, true},
		{"timeouts within the bound", func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = 300*time.Millisecond, 500*time.Millisecond },
			[]Option{WithRedisTimeout(600 * time.Millisecond)}, true},
		{"default timeouts", func(*redis.Options) {}, nil, false},
		{"write timeout beyond the bound", func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = time.Second, 2*time.Second }, nil, false},
		{"no read timeout", func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = -1, time.Second }, nil, false},
		{"bound shorter than the timeouts", func(o *redis.Options) { o.ReadTimeout = time.Second },
			[]Option{WithRedisTimeout(500 * time.Millisecond)}, false},
	}
	backends := []struct {
		name string
		dial func(t *testing.T) func(configure func(*redis.Options)) *redis.Client
	}{
		{"miniredis", func(t *testing.T) func(func(*redis.Options)) *redis.Client {
			mr := miniredis.RunT(t)
			return func(configure func(*redis.Options)) *redis.Client {
				o := &redis.Options{Addr: mr.Addr()}
				configure(o)
				c := redis.NewClient(o)
				t.Cleanup(func() { c.Close() })
				return c
			}
		}},
		{"redis", func(t *testing.T) func(func(*redis.Options)) *redis.Client {
			srv := redistest.Start(t)
			return func(configure func(*redis.Options)) *redis.Client { return srv.NewClient(configure) }
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			dial := b.dial(t)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					c := dial(tc.configure)
					hook := &goroutineHook{}
					c.AddHook(hook)
					th := mustNew(t, c, "inline:"+t.Name(), 1<<20, time.Second, append([]Option{WithLogger(quiet)}, tc.opts...)...)
					ctx := context.Background()
					for range 5 {
						if err := th.Wait(ctx); err != nil {
							t.Fatal(err)
						}
					}
					if _, err := th.Usage(ctx); err != nil {
						t.Fatal(err)
					}
					waitIdle(t, th)
					inline, handOff := hook.counts()
					if inline+handOff == 0 {
						t.Fatal("the hook saw no round trip")
					}
					if tc.inline && handOff > 0 {
						t.Errorf("%d of %d round trips ran in a helper goroutine, want none", handOff, inline+handOff)
					}
					if !tc.inline && inline > 0 {
						t.Errorf("%d of %d round trips ran in the caller's goroutine, want every one in a helper goroutine", inline, inline+handOff)
					}
				})
			}
		})
	}
}

// A ring built with ContextTimeoutEnabled passes it to its shards' clients:
// its round trips run in the caller's goroutine too. Without it, in a
// helper goroutine, whatever its timeouts: even socket timeouts no longer
// than the Redis timeout (a *redis.Client with those runs inline).
func TestRingRoundTripsInline(t *testing.T) {
	mr := miniredis.RunT(t)
	for _, ctxTimeouts := range []bool{true, false} {
		ring := redis.NewRing(&redis.RingOptions{
			Addrs:                 map[string]string{"a": mr.Addr()},
			ReadTimeout:           time.Second, // WithRedisTimeout's default
			WriteTimeout:          time.Second,
			ContextTimeoutEnabled: ctxTimeouts,
		})
		t.Cleanup(func() { ring.Close() })
		hook := &goroutineHook{}
		ring.AddHook(hook)
		th := mustNew(t, ring, "ring", 1<<20, time.Second, WithLogger(quiet))
		for range 3 {
			if err := th.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		waitIdle(t, th)
		inline, handOff := hook.counts()
		if ctxTimeouts && (handOff > 0 || inline == 0) {
			t.Errorf("ContextTimeoutEnabled: %d round trips in the caller's goroutine, %d in a helper, want all in the caller's", inline, handOff)
		}
		if !ctxTimeouts && (inline > 0 || handOff == 0) {
			t.Errorf("without ContextTimeoutEnabled: %d round trips in the caller's goroutine, %d in a helper, want all in a helper", inline, handOff)
		}
	}
}

// silentRedis listens on loopback, accepts connections and reads all they
// send, but never answers: a Redis that hangs, whatever the client does.
func silentRedis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				c.Close()
			} else {
				conns = append(conns, c)
			}
			mu.Unlock()
			wg.Go(func() { io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// A Redis that accepts connections and never answers fails every call with
// ErrRedis (FailClosed) within the Redis timeout, whether the round trip is
// bounded by a helper goroutine (go-redis's default options), by the
// client's own socket timeouts, or by its context. The bound checked is
// three times the timeout: room for a loaded machine, never a timing
// target.
func TestRedisNeverAnswers(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, tc := range []struct {
		name      string
		configure func(*redis.Options)
	}{
		{"default options", func(*redis.Options) {}},
		{"timeouts within the bound", func(o *redis.Options) { o.ReadTimeout = timeout }},
		{"ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := silentRedis(t)
			o := &redis.Options{Addr: addr}
			tc.configure(o)
			c := redis.NewClient(o)
			// Registered after the server's cleanup, so run before it:
			// closing the client ends what a helper goroutine still reads.
			t.Cleanup(func() { c.Close() })
			th := mustNew(t, c, "silent", 10, time.Second, WithLogger(quiet), WithRedisTimeout(timeout))
			ctx := context.Background()
			within := func(what string, call func() error) {
				t.Helper()
				start := time.Now()
				err := call()
				took := time.Since(start)
				if !errors.Is(err, ErrRedis) {
					t.Errorf("%s: got %v, want an error wrapping ErrRedis", what, err)
				}
				if took > 3*timeout {
					t.Errorf("%s took %s with a Redis timeout of %s", what, took, timeout)
				}
			}
			within("Wait", func() error { return th.Wait(ctx) })
			within("Usage", func() error { _, err := th.Usage(ctx); return err })
			waitIdle(t, th)
		})
	}
}
