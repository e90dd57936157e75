// Package throttlergrpc throttles a gRPC client's calls on a
// throttler.Throttler: interceptors that wait for each call's quota,
// shared by every replica through Redis, before the call is made, and
// that share the API's refusals (RESOURCE_EXHAUSTED, UNAVAILABLE with
// RetryInfo or a pushback) with every replica, as throttler.Transport
// does for HTTP.
//
// Quick start: one quota for every method of the API,
//
//	t, err := throttler.New(rdb, "speech-api", 300, time.Minute)
//	if err != nil { ... }
//	conn, err := grpc.NewClient(target,
//		grpc.WithTransportCredentials(creds),
//		grpc.WithChainUnaryInterceptor(throttlergrpc.UnaryClientInterceptor(
//			throttlergrpc.Throttler(t), throttlergrpc.WithRetries(2))),
//		grpc.WithChainStreamInterceptor(throttlergrpc.StreamClientInterceptor(
//			throttlergrpc.Throttler(t))),
//	)
//
// Every call made on conn then waits, with its own context, until the
// shared window has room; a call whose earliest slot lies past its
// deadline fails at once with RESOURCE_EXHAUSTED. When the API refuses a
// call with RESOURCE_EXHAUSTED and a google.rpc.RetryInfo (or a
// grpc-retry-pushback-ms trailer), every replica pauses until the delay
// is over, and WithRetries makes the call again after it. A quota per method is ByMethod's; a quota per credential,
// through a throttler.Group, is GroupRoute's. A call's cost
// (throttler.ContextWithCost), tenant (throttler.ContextWithTenant) and
// priority (throttler.ContextWithPriority) come from its context, as for
// any wait.
//
// Two things a user must know, spelled out at UnaryClientInterceptor: a
// call goes the moment its wait returns, so a connection that must first
// be dialed makes it late for its slot (warm the ClientConn, or give
// throttler.WithBuffer the dial's time); and grpc-go's own retries
// (retryPolicy in a service config) happen below the interceptor,
// unthrottled (grpc.WithDisableRetry, and WithRetries instead).
//
// throttlergrpc is a Go module of its own, so that the throttler's users
// who do not use gRPC never download it.
package throttlergrpc
