package throttlergrpc

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/go-throttler/throttler"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// verdict is what one call's outcome says of the API's quota.
type verdict struct {
	// refused: the API refused the call for quota (RESOURCE_EXHAUSTED, or
	// UNAVAILABLE with RetryInfo): every replica pauses, and the call may
	// be made again (WithRetries).
	refused bool
	// delay is RetryInfo's retry_delay, when positive, else the
	// server's grpc-retry-pushback-ms: the pause's length (at most
	// WithMaxPause). Zero for a refusal: a back-off.
	delay time.Duration
	// final: the server said not to retry (a negative or malformed
	// grpc-retry-pushback-ms): the call is not made again, whatever
	// WithRetries allows; every replica pauses all the same.
	final bool
}

// pushbackKey is the trailer in which a gRPC server tells its clients how
// long to wait before they retry (gRFC A6: milliseconds, a non-negative
// decimal integer; a negative or malformed one says not to retry).
const pushbackKey = "grpc-retry-pushback-ms"

// readStatus reads a call's error, and the metadata it came with (mds:
// its trailer, where a server's grpc-retry-pushback-ms is), as the API's
// answer. Not a refusal: a nil error, one of this module's (localError: a
// wait's RESOURCE_EXHAUSTED is no word from the API), any code but
// RESOURCE_EXHAUSTED and UNAVAILABLE, an UNAVAILABLE without a positive
// RetryInfo delay or pushback (a connection lost, a server restarting:
// the call's own), and the RESOURCE_EXHAUSTED grpc-go itself gives a
// message over the size limits or an HTTP/2 flow-control error (see
// notQuota).
func readStatus(err error, mds ...metadata.MD) (verdict, *status.Status) {
	if err == nil || isLocal(err) {
		return verdict{}, nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return verdict{}, nil
	}
	var v verdict
	switch st.Code() {
	case codes.ResourceExhausted:
		if notQuota(st.Message()) {
			return verdict{}, st
		}
		v.refused = true
		v.delay = retryDelay(st)
		if v.delay == 0 {
			v.delay, v.final = pushback(mds)
		}
	case codes.Unavailable:
		if v.delay = retryDelay(st); v.delay == 0 {
			v.delay, v.final = pushback(mds)
		}
		v.refused = v.delay > 0
		v.final = v.final && v.refused
	}
	return v, st
}

// pushback is the delay a server's grpc-retry-pushback-ms in mds asks
// for (0 when it asks for none, or names none), and whether it says not
// to retry at all.
func pushback(mds []metadata.MD) (delay time.Duration, final bool) {
	for _, md := range mds {
		v := md.Get(pushbackKey)
		if len(v) == 0 {
			continue
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
		if err != nil || ms < 0 {
			return 0, true
		}
		return time.Duration(min(ms, int64(maxPushback/time.Millisecond))) * time.Millisecond, false
	}
	return 0, false
}

// maxPushback bounds the delay read from a pushback, before WithMaxPause
// bounds the pause: a duration that overflows is no delay at all.
const maxPushback = 24 * time.Hour

// notQuota reports whether a RESOURCE_EXHAUSTED's message is one grpc-go
// (or the server's gRPC library) gives for a message over the size limits
// ("received message larger than max", "trying to send message larger
// than max", "message too large", "... after decompression larger than
// max") or an HTTP/2 stream reset for flow control: the call's own
// fault, which no pause would cure.
func notQuota(msg string) bool {
	return strings.Contains(msg, "larger than max") ||
		strings.Contains(msg, "message too large") ||
		strings.Contains(msg, "exceeds maximum size") || // grpc-java's
		strings.Contains(msg, "FLOW_CONTROL_ERROR")
}

// retryDelay is the positive retry_delay of st's google.rpc.RetryInfo
// detail, 0 when it has none.
func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if delay := ri.GetRetryDelay().AsDuration(); delay > 0 {
				return delay
			}
		}
	}
	return 0
}

// limitOf is the least limit the call's answer states, 0 when it states
// none: in the metadata entry WithLimitMetadata names (header and
// trailer, and a refusal's ErrorInfo metadata), and with
// WithQuotaFailureLimit a refusal's QuotaFailure.
func (c *config) limitOf(st *status.Status, mds ...metadata.MD) int {
	least := 0
	take := func(n int64) {
		if n > 0 && (least == 0 || n < int64(least)) {
			least = int(min(n, int64(^uint32(0)>>1)))
		}
	}
	if c.limitKey != "" {
		for _, md := range mds {
			if v := md.Get(c.limitKey); len(v) > 0 {
				take(parseLimit(v[0]))
			}
		}
	}
	if st == nil || (c.limitKey == "" && !c.quotaValue) {
		return least
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if c.limitKey != "" {
				if v, ok := d.GetMetadata()[c.limitKey]; ok {
					take(parseLimit(v))
				}
			}
		case *errdetails.QuotaFailure:
			if c.quotaValue {
				for _, v := range d.GetViolations() {
					take(v.GetQuotaValue())
					if v.FutureQuotaValue != nil {
						take(v.GetFutureQuotaValue())
					}
				}
			}
		}
	}
	return least
}

// parseLimit parses a stated limit, a decimal integer; 0 when it is none.
func parseLimit(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// pause shares a refusal with every replica of th: until the RetryInfo's
// delay is over (at most WithMaxPause), or a back-off when it states
// none. ctx is the call's, without its cancellation: the news is for
// everyone, whatever becomes of the call. A failed write is th's to log;
// the pause holds in this process all the same.
func (c *config) pause(ctx context.Context, th *throttler.Throttler, v verdict) {
	if v.delay > 0 {
		_ = th.PauseUntil(ctx, time.Now().Add(min(v.delay, c.maxPause)))
		return
	}
	_ = th.BackOff(ctx, c.backoff, c.maxPause)
}
