package throttlergrpc

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/go-throttler/throttler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// StreamClientInterceptor returns a grpc.StreamClientInterceptor that
// waits on the Throttler route picks for each stream before creating it,
// and shares the API's refusals with every replica through Redis, as
// UnaryClientInterceptor does for a unary call. Install it with
// grpc.WithChainStreamInterceptor (or grpc.WithStreamInterceptor).
//
// A stream is one call: the one the API counts as its headers reach it,
// when the stream is created. It waits once, before then, with the
// stream's context, for the cost the context carries (or 1), and its
// wait fails as a unary call's does (see UnaryClientInterceptor): the
// stream is not created, and the interceptor returns the error. The
// messages sent and received on the stream wait for nothing.
//
// What the API answers is read once per stream, from the first of:
// the creation's error; the first error RecvMsg returns (CloseAndRecv's
// included, io.EOF being success), or Header's, or SendMsg's other than
// io.EOF (grpc-go reports a stream's status through RecvMsg); a refusal
// (RESOURCE_EXHAUSTED, or UNAVAILABLE with RetryInfo or a pushback)
// pauses every replica as it does for a unary call. The trailer (its
// pushback, and with WithLimitMetadata its limit) is read once the stream
// has ended; with WithLimitMetadata, the header once the first message
// has come.
//
// Retries (WithRetries) apply to the creation only, for nothing of the
// stream was sent then: a refusal the server sends once the stream is
// under way (at its first RecvMsg, the usual way a server-streaming
// call's refusal comes) pauses every replica and is returned to the
// caller, whose messages the interceptor does not keep; the caller may
// make the call again, and its new stream waits out the pause.
//
// The stream's permit ends when RecvMsg returns an error (io.EOF
// included), when a call that does not stream from the server has its
// reply, or when the stream's context ends: with throttler.WithInFlight
// its place in flight goes back then, so a stream the caller neither
// drains nor cancels holds its place as long as its context lasts, as
// grpc-go holds its resources. A stream that carries a cost (or with
// WithActualCost, which streams do not ask) is settled at 0 when
// refused, and keeps its estimate otherwise.
//
// Where the slot is counted, and grpc-go's own retries: see
// UnaryClientInterceptor. route nil, or a bad Option, fails every stream,
// uncreated, with an error wrapping throttler.ErrInvalidArgument. The
// interceptor and the streams it returns are safe for concurrent use as
// grpc-go's are (one goroutine may call SendMsg while another calls
// RecvMsg).
func StreamClientInterceptor(route Route, opts ...Option) grpc.StreamClientInterceptor {
	ic := newInterceptor("StreamClientInterceptor", route, opts)
	return ic.stream
}

func (ic *interceptor) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	th, err := ic.pick(ctx, method)
	if err != nil {
		return nil, err
	}
	if th == nil {
		return streamer(ctx, desc, cc, method, opts...)
	}
	var watched grpc.ClientStream
	err = ic.tries(ctx, th, func(p *throttler.Permit, priced bool) (bool, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err == nil {
			watched = ic.watch(ctx, th, p, priced, desc, cs) // it ends the permit
			return false, nil
		}
		v := ic.learn(ctx, th, err)
		ic.end(ctx, p, priced, v, nil)
		return v.refused && !v.final, err
	})
	if err != nil {
		return nil, err
	}
	return watched, nil
}

// watchedStream is a ClientStream whose first error is read as the API's
// answer, and whose end ends its permit.
type watchedStream struct {
	grpc.ClientStream
	ic     *interceptor
	ctx    context.Context
	th     *throttler.Throttler
	p      *throttler.Permit
	priced bool
	unary  bool // the server sends one message: the stream ends with it

	headerRead atomic.Bool // WithLimitMetadata: the header was read
	once       sync.Once   // finish
	stop       func() bool // stops the AfterFunc that ends the permit with ctx
}

func (ic *interceptor) watch(ctx context.Context, th *throttler.Throttler, p *throttler.Permit, priced bool, desc *grpc.StreamDesc, cs grpc.ClientStream) grpc.ClientStream {
	s := &watchedStream{ClientStream: cs, ic: ic, ctx: ctx, th: th, p: p, priced: priced, unary: !desc.ServerStreams}
	// A stream ends with its context whatever the caller does; the
	// permit's Done is idempotent, so a finish after it changes nothing
	// but a refusal's settle.
	s.stop = context.AfterFunc(ctx, p.Done)
	return s
}

// RecvMsg reads the first error it returns as the API's answer.
func (s *watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case err != nil:
		s.finish(err, true)
	case s.unary:
		// grpc-go has read the status already (it expects nothing after
		// the one reply): the call is over, successfully.
		s.readHeader()
		s.finish(io.EOF, true)
	default:
		s.readHeader()
	}
	return err
}

// SendMsg reads an error other than io.EOF (with which grpc-go says the
// stream has ended, its status for RecvMsg to return) as the stream's end.
func (s *watchedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && err != io.EOF {
		s.finish(err, false)
	}
	return err
}

// Header reads an error as the stream's end. (grpc-go's returns none:
// it leaves the status to RecvMsg; a stream an interceptor below returns
// may.)
func (s *watchedStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if err != nil {
		s.finish(err, false)
	}
	return md, err
}

// readHeader follows the limit the header states, once a message has
// come (so the header is there: Header does not block).
func (s *watchedStream) readHeader() {
	if s.ic.cfg.limitKey == "" || s.headerRead.Swap(true) {
		return
	}
	if md, err := s.ClientStream.Header(); err == nil {
		s.ic.learn(s.ctx, s.th, nil, md)
	}
}

// finish reads the stream's end, err (io.EOF for success), once: what the
// API answered, and with trailerReady (RecvMsg has returned an error, or
// the one reply) its trailer's pushback and limit; and ends the permit.
func (s *watchedStream) finish(err error, trailerReady bool) {
	s.once.Do(func() {
		s.stop()
		if err == io.EOF {
			err = nil
		}
		var trailer metadata.MD
		if trailerReady {
			trailer = s.ClientStream.Trailer()
		}
		v := s.ic.learn(s.ctx, s.th, err, trailer)
		s.ic.end(s.ctx, s.p, s.priced, v, nil)
	})
}
