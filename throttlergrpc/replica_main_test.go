package throttlergrpc

// The replica program of TestReplicasAgainstAStrictFake: the test binary,
// re-executed with THROTTLER_REPLICA=1 (internal/replica's ModeEnv), runs
// one replica: a Throttler on the shared key, and goroutines calling the
// fake through a ClientConn with the interceptor, until stdin closes.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/replica"
)

// The metadata each call of a replica carries, for the fake to record:
// the replica, when the call left (the wait had returned), and when the
// replica first learned of a shared pause (0: not yet), on the machine's
// clock, in Unix nanoseconds.
const (
	mdReplica = "x-replica"
	mdSent    = "x-sent"
	mdLearned = "x-learned"
)

// thinkEnv, when set, is a duration: each of a replica's goroutines waits a
// random time, from 0 to twice that, before each call, so that the
// replica's demand is spread over time rather than as fast as its calls
// are let through.
const thinkEnv = "THROTTLERGRPC_REPLICA_THINK"

// The test binary doubles as the replica program: with THROTTLER_REPLICA=1
// it runs one replica and exits before any test (and TestMain's leak
// check) runs.
func init() {
	if os.Getenv(replica.ModeEnv) != "1" {
		return
	}
	os.Exit(replicaMain())
}

// replicaMain runs one replica, and reports on stdout, in
// internal/replica's lines, each call that failed (a get line: its code
// and message) and, at its end, how many calls began and returned (a
// summary line).
func replicaMain() int {
	cfg, err := replica.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Addr})
	defer rdb.Close()
	var learned atomic.Int64
	th, err := throttler.New(rdb, cfg.Key, cfg.Limit, cfg.Interval,
		throttler.WithBuffer(cfg.Buffer),
		throttler.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		throttler.WithObserver(throttler.Observer{Paused: func(time.Time) {
			learned.CompareAndSwap(0, time.Now().UnixNano())
		}}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	// Inside the interceptor's: it runs once the wait has returned, for
	// every attempt.
	stamp := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx = metadata.AppendToOutgoingContext(ctx, mdReplica, cfg.ID,
			mdSent, strconv.FormatInt(time.Now().UnixNano(), 10), mdLearned, strconv.FormatInt(learned.Load(), 10))
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient("passthrough:///"+cfg.API,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDisableRetry(),
		grpc.WithChainUnaryInterceptor(
			UnaryClientInterceptor(Throttler(th), WithRetries(2), WithQuotaFailureLimit()),
			stamp))
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	defer conn.Close()
	if err := warm(conn, 10*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	client := testpb.NewTestServiceClient(conn)

	var outMu sync.Mutex
	out := func(line []byte) {
		outMu.Lock()
		defer outMu.Unlock()
		os.Stdout.Write(line)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it (or dies)
		cancel()
	}()
	think, err := time.ParseDuration(cmp.Or(os.Getenv(thinkEnv), "0s"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 2
	}
	var started, returned atomic.Int64
	var wg sync.WaitGroup
	for range cfg.Goroutines {
		wg.Go(func() {
			for ctx.Err() == nil {
				if think > 0 {
					time.Sleep(rand.N(2 * think))
				}
				started.Add(1)
				_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
				returned.Add(1)
				if err != nil && ctx.Err() == nil {
					out(replica.GetLine(fmt.Sprintf("%v %s", status.Code(err), err)))
				}
			}
		})
	}
	wg.Wait()
	out(replica.SummaryLine(started.Load(), returned.Load()))
	// The Throttler's goroutines end within a second of its last call.
	for deadline := time.Now().Add(3 * time.Second); !idle(th) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return 0
}

// warm connects conn and waits until it is ready, so that no call waits
// for a dial past its slot.
func warm(conn *grpc.ClientConn, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			return errors.New("the connection is not ready: " + s.String())
		}
	}
	return nil
}
