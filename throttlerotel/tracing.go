package throttlerotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/go-throttler/throttler"
	"github.com/go-throttler/throttler/counters"
)

// Names of what this package records on traces. No event or attribute
// name is the name of a metric, nor a namespace of one (throttler.wait.*
// holds the metric throttler.wait.duration and the event
// throttler.wait.end); span names are free of that rule.
const (
	// WaitSpanName names the span of a wait (TraceSpans).
	WaitSpanName = "throttler.wait"
	// WaitEventName names the event of a wait (TraceEvents), at its end.
	WaitEventName = "throttler.wait.end"
	// RefusalEventName names the event of one refusal a Transport read;
	// the metric throttler.transport.refusals counts them.
	RefusalEventName = "throttler.transport.refusal"
	// WaitedAttribute is a wait's length in seconds, on its event (whose
	// time is the wait's end): the sample the wait added to the
	// histogram throttler.wait.duration.
	WaitedAttribute = attribute.Key("throttler.waited")
)

// traceWait records w, which ended with o, on ctx's trace as in.rec.tracing
// says, with attrs (the Throttler's) and those of the wait.
func (in *instruments) traceWait(ctx context.Context, w throttler.WaitInfo, o outcome, attrs []attribute.KeyValue) {
	switch in.rec.tracing {
	case TraceEvents:
		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return
		}
		kv := waitAttrs(attrs, w, o, WaitedAttribute.Float64(w.End.Sub(w.Start).Seconds()))
		span.AddEvent(WaitEventName, trace.WithTimestamp(w.End), trace.WithAttributes(kv...))
	case TraceSpans:
		if !in.rec.rootSpans && !trace.SpanContextFromContext(ctx).IsValid() {
			return
		}
		_, span := in.tracer.Start(ctx, WaitSpanName,
			trace.WithTimestamp(w.Start),
			trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(waitAttrs(attrs, w, o)...))
		if w.Err != nil {
			span.SetStatus(codes.Error, w.Err.Error())
		}
		span.End(trace.WithTimestamp(w.End))
	}
}

// waitAttrs returns attrs with those of w, which ended with o, and more.
func waitAttrs(attrs []attribute.KeyValue, w throttler.WaitInfo, o outcome, more ...attribute.KeyValue) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, len(attrs)+4+len(more))
	kv = append(kv, attrs...)
	kv = append(kv, UnitsAttribute.Int(w.N), OutcomeAttribute.String(o.String()))
	if o != admitted {
		kv = append(kv, semconv.ErrorTypeKey.String(o.String()))
	}
	if w.Tenant != "" {
		kv = append(kv, TenantAttribute.String(w.Tenant))
	}
	return append(kv, more...)
}

// traceRefusal records r as an event on the request's span, at r.At (the
// refusal's time, before a RetryCall's delay), unless in.rec.tracing is
// TraceOff; attrs are the Transport's.
func (in *instruments) traceRefusal(ctx context.Context, r throttler.Refusal, attrs []attribute.KeyValue) {
	if in.rec.tracing == TraceOff {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	kv := make([]attribute.KeyValue, 0, len(attrs)+5)
	kv = append(kv, attrs...)
	kv = append(kv,
		KeyAttribute.String(r.Throttler.Key()),
		semconv.HTTPResponseStatusCodeKey.Int(r.StatusCode),
		VerdictAttribute.String(verdictName(r.Verdict)),
		AttemptAttribute.Int(r.Attempt),
		RetryAttribute.Bool(r.Retry))
	span.AddEvent(RefusalEventName, trace.WithTimestamp(r.At), trace.WithAttributes(kv...))
}

// verdictName is v as the attribute throttler.verdict names it.
func verdictName(v counters.Verdict) string {
	switch v {
	case counters.Pause:
		return "pause"
	case counters.RetryCall:
		return "retry_call"
	}
	return "proceed"
}
