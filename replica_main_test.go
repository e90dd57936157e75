package throttler

// The replica program of the fault tests: the test binary, re-executed with
// THROTTLER_REPLICA=1, runs one replica and reports what it does on stdout.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-throttler/throttler/internal/fakeapi"
	"github.com/go-throttler/throttler/internal/replica"
	"github.com/redis/go-redis/v9"
)

// The test binary doubles as the replica program: run with
// THROTTLER_REPLICA=1 it runs one replica and exits before any test (and
// before TestMain's leak check) runs.
func init() {
	if os.Getenv(replica.ModeEnv) != "1" {
		return
	}
	os.Exit(replicaMain())
}

// requestIDHeader tags every request a replica sends with a unique id, so the
// API side can tell a request received twice.
const requestIDHeader = "X-Request-Id"

// replicaMain runs one replica: G goroutines loop Wait then GET (or a GET
// through the Throttler's RoundTripper) against the fake API until stdin
// closes, reporting every event on stdout, one line per os.Stdout.Write.
func replicaMain() int {
	cfg, err := replica.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	out := newReplicaOut()
	client := redis.NewClient(&redis.Options{Addr: cfg.Addr})
	defer client.Close()
	opts := []Option{
		WithBuffer(cfg.Buffer),
		WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
	if skew := cfg.Skew; skew != 0 {
		opts = append(opts, WithClock(func() time.Time { return time.Now().Add(skew) }))
	}
	if cfg.RedisTimeout > 0 {
		opts = append(opts, WithRedisTimeout(cfg.RedisTimeout))
	}
	if cfg.InFlight > 0 {
		if !cfg.RoundTripper {
			// A Wait takes no place: only calls whose end is seen do.
			fmt.Fprintln(os.Stderr, "replica: InFlight needs RoundTripper")
			return 2
		}
		opts = append(opts, WithInFlight(cfg.InFlightKey, cfg.InFlight, cfg.LeaseTTL))
	}
	th, err := New(client, cfg.Key, cfg.Limit, cfg.Interval, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	// The hooks run under th.mu: they only queue a line.
	th.hooks.onAdmit = func(score int64, members []string) { out.add(replica.AdmitLine(score, members)) }
	th.hooks.onRelease = func(members []string) { out.add(replica.ReleaseLine(members)) }
	if cfg.KillMid > 0 {
		events := 0
		th.hooks.onResolved = func(rejected int) {
			if rejected == 0 {
				return
			}
			if events++; events < cfg.KillMid {
				return
			}
			// Rejected claims' members are in Redis, to be given back with
			// the next round trip, which never comes.
			out.last(replica.KillMidLine(rejected))
			if p, err := os.FindProcess(os.Getpid()); err == nil && p.Kill() == nil { // SIGKILL
				time.Sleep(time.Hour) // holding th.mu until the signal lands
			}
			os.Exit(3) // could not kill itself: the parent reports a crash
		}
	}
	out.add(replica.StartLine(os.Getpid(), th.ids.prefix[:]))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stopping atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it (or dies)
		stopping.Store(true)
		if cfg.RoundTripper {
			// A call through the RoundTripper is cancelled with its wait;
			// let the calls finish rather than cut requests in flight.
			time.Sleep(3 * time.Second)
		}
		cancel()
	}()

	var plain, throttled *http.Client
	if cfg.RoundTripper {
		// Idle connections enough for every goroutine: a call does not wait
		// for a new connection while it holds a place in flight.
		base := &http.Transport{MaxIdleConnsPerHost: cfg.Goroutines}
		defer base.CloseIdleConnections()
		throttled = &http.Client{Transport: th.RoundTripper(base)}
	} else {
		plain = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
		defer plain.CloseIdleConnections()
	}
	var started, returned atomic.Int64
	var wg sync.WaitGroup
	for g := range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; !stopping.Load() && ctx.Err() == nil; seq++ {
				id := fmt.Sprintf("%s-%d-%d", cfg.ID, g, seq)
				started.Add(1)
				var err error
				if cfg.RoundTripper {
					err = replicaGet(ctx, throttled, cfg.API, cfg.ID, id)
				} else {
					err = th.Wait(ctx)
				}
				returned.Add(1)
				class := waitErrClass(err)
				msg := ""
				if err != nil {
					msg = err.Error()
				}
				out.add(replica.WaitLine(class, msg))
				if err != nil {
					if ctx.Err() == nil {
						time.Sleep(10 * time.Millisecond) // Redis fails: do not spin
					}
					continue
				}
				if !cfg.RoundTripper {
					// The call goes whatever happens to ctx now: it was admitted.
					if err := replicaGet(context.Background(), plain, cfg.API, cfg.ID, id); err != nil {
						out.add(replica.GetLine(err.Error()))
					}
				}
			}
		}()
	}
	wg.Wait()
	// Let the worker give back what the cancelled calls held, and the lease
	// keeper the places they were granted.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		th.mu.Lock()
		running := th.worker.running || th.lease != nil && th.lease.keeper
		th.mu.Unlock()
		if !running {
			break
		}
	}
	out.add(replica.SummaryLine(started.Load(), returned.Load()))
	out.close()
	return 0
}

// replicaGet makes one call to the API and reads and closes the response body.
func replicaGet(ctx context.Context, c *http.Client, url, replicaID, requestID string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set(fakeapi.ReplicaHeader, replicaID)
	req.Header.Set(requestIDHeader, requestID)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// waitErrClass sorts a Wait's error: "" for nil, and the only kinds a Wait may
// return under FailClosed, or "other".
func waitErrClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrRedis):
		return "redis"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "other"
}

// replicaOut writes a replica's lines from one goroutine, each with a single
// os.Stdout.Write, so that a SIGKILL loses only lines not yet written. add
// may be called under the Throttler's mutex: it only queues.
type replicaOut struct {
	mu      sync.Mutex // guards pending
	pending [][]byte
	kick    chan struct{}
	done    chan struct{}
	write   sync.Mutex // held while writing
}

func newReplicaOut() *replicaOut {
	o := &replicaOut{kick: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		for {
			select {
			case <-o.kick:
				o.flush()
			case <-o.done:
				o.flush()
				return
			}
		}
	}()
	return o
}

func (o *replicaOut) add(line []byte) {
	o.mu.Lock()
	o.pending = append(o.pending, line)
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

func (o *replicaOut) flush() {
	o.write.Lock()
	defer o.write.Unlock()
	o.drainLocked()
}

func (o *replicaOut) drainLocked() {
	o.mu.Lock()
	p := o.pending
	o.pending = nil
	o.mu.Unlock()
	for _, line := range p {
		_, _ = os.Stdout.Write(line)
	}
}

// last writes everything queued and then line, and keeps the writer from
// writing anything after it (the process is about to die).
func (o *replicaOut) last(line []byte) {
	o.write.Lock()
	o.drainLocked()
	_, _ = os.Stdout.Write(line)
}

func (o *replicaOut) close() {
	close(o.done)
	o.flush()
}
