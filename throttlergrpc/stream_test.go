package throttlergrpc

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/go-throttler/throttler"
)

// drain reads a server stream to its end, and returns its error (nil for
// io.EOF) and the messages read.
func drain(s testpb.TestService_StreamingOutputCallClient) (int, error) {
	n := 0
	for {
		_, err := s.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// A stream waits once, before it is created; one whose slot lies past its
// deadline is not created.
func TestStreamWaits(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		f := &fake{streamMsgs: 3}
		th := newThrottler(t, dial_(), key, 2, 10*time.Second)
		client := dial(t, f.serve(t), interceptors(Throttler(th))...)
		for range 2 {
			s, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if n, err := drain(s); err != nil || n != 3 {
				t.Fatalf("the stream: %d messages, %v; want 3, nil", n, err)
			}
		}
		if got := th.Stats().Waits; got != 2 {
			t.Errorf("Stats().Waits = %d after two streams of 3 messages, want 2", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
		if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 300*time.Millisecond {
			t.Errorf("a stream past its deadline: %v after %s, want RESOURCE_EXHAUSTED at once", err, time.Since(start))
		}
		if n := len(f.seen()); n != 2 {
			t.Errorf("the fake saw %d streams, want 2", n)
		}
	})
}

// A refusal that comes with the stream's first RecvMsg pauses every
// replica; it is the caller's (not retried: the request was sent).
func TestStreamRefusalPauses(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		r := twoReplicas(t, dial_, key, WithRetries(3))
		r.f.push(withDetails(codes.ResourceExhausted, "quota", retryInfo(300*time.Millisecond)))
		s, err := r.a.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := drain(s); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("the stream: %v, want RESOURCE_EXHAUSTED", err)
		}
		refused := r.lastAt(t)
		s, err = r.b.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := drain(s); err != nil {
			t.Fatal(err)
		}
		if waited := r.lastAt(t).Sub(refused); waited < 290*time.Millisecond {
			t.Errorf("b's stream came %s after the refusal, want at least 300ms", waited)
		}
		if n := len(r.f.seen()); n != 2 {
			t.Errorf("the fake saw %d streams, want 2 (a refused stream is not retried)", n)
		}

		// Client streaming: the refusal comes with CloseAndRecv.
		r.f.push(withDetails(codes.ResourceExhausted, "quota", retryInfo(200*time.Millisecond)))
		cs, err := r.a.StreamingInputCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		cs.Send(&testpb.StreamingInputCallRequest{})
		if _, err := cs.CloseAndRecv(); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("the client stream: %v, want RESOURCE_EXHAUSTED", err)
		}
		refused = r.lastAt(t)
		if _, err := r.b.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		if waited := r.lastAt(t).Sub(refused); waited < 190*time.Millisecond {
			t.Errorf("b's call came %s after the client stream's refusal, want at least 200ms", waited)
		}

		// A pushback in the stream's trailer, without RetryInfo: the
		// pause it asks for, not the default back-off (a second).
		r.f.setTrailer(metadata.Pairs("grpc-retry-pushback-ms", "300"))
		r.f.push(status.New(codes.ResourceExhausted, "quota"))
		s, err = r.a.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := drain(s); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("the stream with a pushback: %v, want RESOURCE_EXHAUSTED", err)
		}
		refused = r.lastAt(t)
		if _, err := r.b.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
			t.Fatal(err)
		}
		if waited := r.lastAt(t).Sub(refused); waited < 290*time.Millisecond || waited > 900*time.Millisecond {
			t.Errorf("b's call came %s after the stream's refusal with a pushback of 300ms, want 300ms", waited)
		}
	})
}

// A stream holds its place in flight (throttler.WithInFlight) until it
// ends: drained, its one reply received, or its context cancelled. A
// refused stream that carries a cost is settled at 0.
func TestStreamEnds(t *testing.T) {
	eachBackend(t, func(t *testing.T, dial_ dialer, key string) {
		f := &fake{streamMsgs: 2}
		th := newThrottler(t, dial_(), key, 100, 10*time.Second,
			throttler.WithInFlight("{"+key+"}:inflight", 1, 10*time.Second))
		client := dial(t, f.serve(t), interceptors(Throttler(th))...)
		inFlight := func(step string, want int) {
			t.Helper()
			// A cancelled stream's place goes back from its context's
			// AfterFunc, on a goroutine of its own.
			deadline := time.Now().Add(2 * time.Second)
			for th.Stats().Places.InFlight != want && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if got := th.Stats().Places.InFlight; got != want {
				t.Errorf("%s: %d calls in flight, want %d", step, got, want)
			}
		}

		s, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		inFlight("a stream open", 1)
		if _, err := drain(s); err != nil {
			t.Fatal(err)
		}
		inFlight("a stream drained", 0)

		cs, err := client.StreamingInputCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		cs.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: []byte("abc")}})
		if res, err := cs.CloseAndRecv(); err != nil || res.GetAggregatedPayloadSize() != 3 {
			t.Fatalf("CloseAndRecv: %v, %v", res, err)
		}
		inFlight("a client stream answered", 0)

		used := func() int { return usedUnits(t, th) }
		before := used()
		f.push(withDetails(codes.ResourceExhausted, "quota", retryInfo(time.Millisecond)))
		s, err = client.StreamingOutputCall(throttler.ContextWithCost(context.Background(), 4), &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := drain(s); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("the priced stream: %v, want RESOURCE_EXHAUSTED", err)
		}
		if got := used(); got != before {
			t.Errorf("a refused stream of cost 4 left %d units in the window, want %d (settled at 0)", got, before)
		}
		inFlight("a stream refused", 0)

		// Last: a stream cancelled before it is read may reach the server
		// any time later, or never, and would take a refusal pushed for
		// the next call.
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := client.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}); err != nil {
			t.Fatal(err)
		}
		inFlight("a stream open, not read", 1)
		cancel()
		inFlight("a stream cancelled", 0)
	})
}
