package throttlerotel

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/go-throttler/throttler"
)

// ShadowDecisionAttribute is what enforcement would have done with a call
// that shadow mode (throttler.WithShadow) let go at once, on
// throttler.shadow.wait: "go" (at once), "wait" (for room, then go),
// "refuse" (a wait past its deadline or WithMaxWait, an AllowN refused),
// "undecided" (Redis failed).
const ShadowDecisionAttribute = attribute.Key("throttler.shadow.decision")

// shadowDecision is a shadow decision, in the order of shadowDecisions.
type shadowDecision uint8

const (
	shadowGo shadowDecision = iota
	shadowWait
	shadowRefuse
	shadowUndecided
	numShadowDecisions
)

var shadowDecisions = [numShadowDecisions]string{"go", "wait", "refuse", "undecided"}

// decisionOf is what s says enforcement would have done.
func decisionOf(s throttler.ShadowInfo) shadowDecision {
	switch {
	case s.Err != nil:
		return shadowUndecided
	case s.Refused:
		return shadowRefuse
	case s.Wait > 0:
		return shadowWait
	}
	return shadowGo
}

// shadowInstruments record what shadow mode would have done.
type shadowInstruments struct {
	wait metric.Float64Histogram
}

// shadowAttrs returns the measurement attributes of each shadow decision,
// those of base and the decision's.
func shadowAttrs(base []attribute.KeyValue) (out [numShadowDecisions]metric.MeasurementOption) {
	base = base[:len(base):len(base)] // each append below copies base
	for d, name := range shadowDecisions {
		out[d] = metric.WithAttributeSet(attribute.NewSet(append(base, ShadowDecisionAttribute.String(name))...))
	}
	return out
}
