package throttlergrpc

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/internal/redistest"
	"github.com/go-throttler/throttler/internal/testhook"
)

func TestMain(m *testing.M) {
	redistest.VerifyTestMain(m)
}

// dialer returns a new client of the backend under test, as each replica
// has its own.
type dialer func() redis.UniversalClient

// eachBackend runs f on miniredis and on a real redis-server (redistest:
// skipped when there is none, failed instead with
// THROTTLER_REQUIRE_REDIS=1).
func eachBackend(t *testing.T, f func(t *testing.T, dial dialer, key string)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		mr := miniredis.RunT(t)
		f(t, func() redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { c.Close() })
			return c
		}, "quota")
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		f(t, func() redis.UniversalClient { return srv.NewClient() }, srv.Key(t, "quota"))
	})
}

// usedUnits is what th's first limit holds, used and reserved.
func usedUnits(t *testing.T, th *throttler.Throttler) int {
	t.Helper()
	u, err := th.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return u[0].Used + u[0].Reserved
}

// newThrottler returns a Throttler on c, which the test's end waits for
// to run no goroutine (before c closes, its cleanup being registered
// later).
func newThrottler(t *testing.T, c redis.UniversalClient, key string, limit int, interval time.Duration, opts ...throttler.Option) *throttler.Throttler {
	t.Helper()
	th, err := throttler.New(c, key, limit, interval, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(10 * time.Second); !testhook.Idle(th); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("the Throttler still runs a goroutine 10s after the test")
				return
			}
		}
	})
	return th
}

// fake is a strict stand-in for a gRPC API (grpc-go's test service): it
// records every call's arrival, and refuses a call with
// RESOURCE_EXHAUSTED when the calls it accepted in the last interval
// (a sliding window, on its own clock) already number quota, stating
// with RetryInfo how long until one more would fit, and with
// quotaFailure its quota in a QuotaFailure. Before its window, it
// answers the scripted statuses, one per call.
type fake struct {
	testpb.UnimplementedTestServiceServer

	mu           sync.Mutex
	quota        int // 0: no window
	interval     time.Duration
	quotaFailure bool
	header       metadata.MD // sent with every call
	trailer      metadata.MD // sent with every call
	script       []*status.Status
	accepted     []time.Time // in the window
	calls        []fakeCall
	streamMsgs   int // messages StreamingOutputCall sends
}

// fakeCall is one call as the fake saw it.
type fakeCall struct {
	at     time.Time
	method string
	code   codes.Code
	md     metadata.MD
}

// serve starts f on a loopback port for the test, and returns its
// address.
func (f *fake) serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, f)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

// setTrailer has f send md as the trailer of every call from now on.
func (f *fake) setTrailer(md metadata.MD) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trailer = md
}

// answer admits or refuses one call arriving now.
func (f *fake) answer(ctx context.Context, method string) error {
	now := time.Now()
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	var st *status.Status
	switch {
	case len(f.script) > 0:
		st, f.script = f.script[0], f.script[1:]
	case f.quota > 0:
		from := now.Add(-f.interval)
		f.accepted = slices.DeleteFunc(f.accepted, func(a time.Time) bool { return !a.After(from) })
		if len(f.accepted) >= f.quota {
			st = f.refusalLocked(now)
		} else {
			f.accepted = append(f.accepted, now)
		}
	}
	c := fakeCall{at: now, method: method, code: st.Code(), md: md}
	f.calls = append(f.calls, c)
	if f.header != nil {
		grpc.SetHeader(ctx, f.header)
	}
	if f.trailer != nil {
		grpc.SetTrailer(ctx, f.trailer)
	}
	return st.Err()
}

// refusalLocked is the fake's refusal at now: RetryInfo says when the
// oldest call that keeps the window full leaves it.
func (f *fake) refusalLocked(now time.Time) *status.Status {
	free := f.accepted[len(f.accepted)-f.quota].Add(f.interval)
	details := []protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(free.Sub(now))}}
	if f.quotaFailure {
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{
			{Subject: "project:test", QuotaId: "CallsPerInterval", QuotaValue: int64(f.quota)},
		}})
	}
	return withDetails(codes.ResourceExhausted, "quota exceeded", details...)
}

// setQuota changes the fake's quota from now on.
func (f *fake) setQuota(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quota = n
}

// push appends statuses to the script.
func (f *fake) push(sts ...*status.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, sts...)
}

// seen returns the calls so far.
func (f *fake) seen() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fake) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	if err := f.answer(ctx, "EmptyCall"); err != nil {
		return nil, err
	}
	return &testpb.Empty{}, nil
}

func (f *fake) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if err := f.answer(ctx, "UnaryCall"); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{Username: "ok"}, nil
}

func (f *fake) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, stream testpb.TestService_StreamingOutputCallServer) error {
	if err := f.answer(stream.Context(), "StreamingOutputCall"); err != nil {
		return err
	}
	f.mu.Lock()
	n := f.streamMsgs
	f.mu.Unlock()
	for range n {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fake) StreamingInputCall(stream testpb.TestService_StreamingInputCallServer) error {
	if err := f.answer(stream.Context(), "StreamingInputCall"); err != nil {
		return err
	}
	size := 0
	for {
		m, err := stream.Recv()
		if err != nil {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(size)})
		}
		size += len(m.GetPayload().GetBody())
	}
}

// dial returns a client of the server at addr through a warm connection
// (made before it returns, as a service's would be before the calls that
// count), with the interceptors given; closed when the test ends.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) testpb.TestServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("the connection to %s is not ready: %v", addr, s)
		}
	}
	return testpb.NewTestServiceClient(conn)
}

// interceptors are the dial options installing both interceptors on route
// with opts.
func interceptors(route Route, opts ...Option) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(UnaryClientInterceptor(route, opts...)),
		grpc.WithChainStreamInterceptor(StreamClientInterceptor(route, opts...)),
	}
}

// maxInWindow is the most of times (in any order) that lie in one window
// (t-w, t].
func maxInWindow(times []time.Time, w time.Duration) int {
	s := slices.Clone(times)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	most, lo := 0, 0
	for hi := range s {
		for !s[lo].After(s[hi].Add(-w)) {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

// arrivals are the times of calls.
func arrivals(calls []fakeCall) []time.Time {
	out := make([]time.Time, len(calls))
	for i, c := range calls {
		out[i] = c.at
	}
	return out
}

// codeCount counts the calls answered code.
func codeCount(calls []fakeCall, code codes.Code) int {
	n := 0
	for _, c := range calls {
		if c.code == code {
			n++
		}
	}
	return n
}

// withDetails is a status of code with msg and details.
func withDetails(code codes.Code, msg string, details ...protoadapt.MessageV1) *status.Status {
	st, err := status.New(code, msg).WithDetails(details...)
	if err != nil {
		panic(err)
	}
	return st
}

// retryInfo is a RetryInfo detail of d.
func retryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}

// idle reports whether th runs no goroutine.
func idle(th *throttler.Throttler) bool { return testhook.Idle(th) }
