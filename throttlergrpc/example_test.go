package throttlergrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/throttlergrpc"
)

// api stands in for a third-party gRPC API (grpc-go's test service): it
// counts the calls it gets, and refuses the first refuse of them with
// RESOURCE_EXHAUSTED and a RetryInfo of 100ms, as Google's APIs do.
type api struct {
	testpb.UnimplementedTestServiceServer
	calls, refuse atomic.Int32
}

func (a *api) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	a.calls.Add(1)
	if a.refuse.Add(-1) >= 0 {
		st, _ := status.New(codes.ResourceExhausted, "quota exceeded").WithDetails(
			&errdetails.RetryInfo{RetryDelay: durationpb.New(100 * time.Millisecond)})
		return nil, st.Err()
	}
	return &testpb.SimpleResponse{}, nil
}

func (a *api) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	a.calls.Add(1)
	return &testpb.Empty{}, nil
}

// world is an embedded Redis and the API in this process, over an
// in-memory connection; a service would dial the API's address, and share
// one Redis with its replicas.
type world struct {
	rdb  *redis.Client
	api  *api
	dial func(opts ...grpc.DialOption) *grpc.ClientConn
	stop func()
}

func newWorld() *world {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	a := &api{}
	testpb.RegisterTestServiceServer(srv, a)
	go srv.Serve(lis)
	var conns []*grpc.ClientConn
	dial := func(opts ...grpc.DialOption) *grpc.ClientConn {
		conn, err := grpc.NewClient("passthrough:///api", append([]grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
		}, opts...)...)
		if err != nil {
			panic(err)
		}
		conns = append(conns, conn)
		return conn
	}
	stop := func() {
		for _, c := range conns {
			c.Close()
		}
		srv.Stop()
		rdb.Close()
		mr.Close()
	}
	return &world{rdb: rdb, api: a, dial: dial, stop: stop}
}

// Every call on the ClientConn waits for the quota that every replica
// shares (here 100 calls a second); a refusal with RetryInfo pauses every
// replica until its delay is over, and WithRetries makes the call again
// then.
func Example() {
	w := newWorld()
	defer w.stop()
	w.api.refuse.Store(1)

	t, err := throttler.New(w.rdb, "test-api", 100, time.Second)
	if err != nil {
		panic(err)
	}
	conn := w.dial(
		grpc.WithChainUnaryInterceptor(throttlergrpc.UnaryClientInterceptor(
			throttlergrpc.Throttler(t), throttlergrpc.WithRetries(2))),
		grpc.WithChainStreamInterceptor(throttlergrpc.StreamClientInterceptor(
			throttlergrpc.Throttler(t))),
	)
	client := testpb.NewTestServiceClient(conn)

	start := time.Now()
	for range 3 {
		if _, err := client.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
			panic(err)
		}
	}
	fmt.Println("3 calls answered; the API saw", w.api.calls.Load())
	fmt.Println("after the refusal's pause:", time.Since(start) >= 100*time.Millisecond)
	fmt.Println("pauses shared:", t.Stats().Pauses)
	// Output:
	// 3 calls answered; the API saw 4
	// after the refusal's pause: true
	// pauses shared: 1
}

// A call whose earliest slot lies past its deadline fails at once, with
// RESOURCE_EXHAUSTED, and is not made.
func ExampleUnaryClientInterceptor_deadline() {
	w := newWorld()
	defer w.stop()

	t, err := throttler.New(w.rdb, "test-api", 1, time.Hour)
	if err != nil {
		panic(err)
	}
	conn := w.dial(grpc.WithChainUnaryInterceptor(
		throttlergrpc.UnaryClientInterceptor(throttlergrpc.Throttler(t))))
	client := testpb.NewTestServiceClient(conn)

	_, err = client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	fmt.Println("first call:", status.Code(err))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{})
	why, _ := throttler.RejectionOf(err)
	fmt.Println("second call:", status.Code(err), why == throttler.RejectedDeadline)
	fmt.Println("the API saw", w.api.calls.Load())
	// Output:
	// first call: OK
	// second call: ResourceExhausted true
	// the API saw 1
}

// ByMethod gives a method its own quota, and the rest of its service
// another; methods of other services go unthrottled.
func ExampleByMethod() {
	w := newWorld()
	defer w.stop()

	unary, err := throttler.New(w.rdb, "test-api:unary", 10, time.Second)
	if err != nil {
		panic(err)
	}
	rest, err := throttler.New(w.rdb, "test-api:rest", 100, time.Second)
	if err != nil {
		panic(err)
	}
	route := throttlergrpc.ByMethod(map[string]*throttler.Throttler{
		"/grpc.testing.TestService/UnaryCall": unary,
		"/grpc.testing.TestService/":          rest,
	})
	client := testpb.NewTestServiceClient(w.dial(
		grpc.WithChainUnaryInterceptor(throttlergrpc.UnaryClientInterceptor(route))))

	client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	client.EmptyCall(context.Background(), &testpb.Empty{})
	client.EmptyCall(context.Background(), &testpb.Empty{})
	fmt.Println("UnaryCall's quota:", unary.Stats().Admitted)
	fmt.Println("the service's:", rest.Stats().Admitted)
	// Output:
	// UnaryCall's quota: 1
	// the service's: 2
}

// GroupRoute gives each API key its own quota, shared by every replica:
// here the key travels in the outgoing metadata, and ByMetadata digests it
// (the key itself never reaches Redis).
func ExampleGroupRoute() {
	w := newWorld()
	defer w.stop()

	g, err := throttler.NewGroup(w.rdb, "test-api:", func(string) (throttler.KeyQuota, error) {
		return throttler.KeyQuota{Limit: 60, Interval: time.Minute}, nil
	})
	if err != nil {
		panic(err)
	}
	route := throttlergrpc.GroupRoute(g, throttlergrpc.ByMetadata("x-api-key"))
	client := testpb.NewTestServiceClient(w.dial(
		grpc.WithChainUnaryInterceptor(throttlergrpc.UnaryClientInterceptor(route))))

	for _, key := range []string{"customer-a", "customer-b", "customer-a"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
		if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			panic(err)
		}
	}
	fmt.Println("keys with a quota:", g.Len())
	// Output:
	// keys with a quota: 2
}

// A call's tenant rides its context, as for the library's other faces:
// the interceptor waits for the call as that tenant's, served in a fair
// order in the process and held to a fair share across replicas while
// the tenant is backlogged; Stats counts it by tenant.
func ExampleUnaryClientInterceptor_tenant() {
	w := newWorld()
	defer w.stop()

	t, err := throttler.New(w.rdb, "test-api", 100, time.Second)
	if err != nil {
		panic(err)
	}
	conn := w.dial(grpc.WithChainUnaryInterceptor(
		throttlergrpc.UnaryClientInterceptor(throttlergrpc.Throttler(t))))
	client := testpb.NewTestServiceClient(conn)

	for _, customer := range []string{"acme", "globex", "acme"} {
		ctx := throttler.ContextWithTenant(context.Background(), customer)
		if _, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			panic(err)
		}
	}
	by := t.Stats().Tenants.ByTenant
	fmt.Println("acme:", by["acme"].Waits, "globex:", by["globex"].Waits)
	// Output:
	// acme: 2 globex: 1
}
