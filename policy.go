package throttler

import "fmt"

// FailurePolicy says what calls do while Redis fails (returns an error or does
// not answer within the Redis timeout). Build one with FailClosed, FailOpen or
// FallbackLocal.
type FailurePolicy struct {
	kind  policyKind
	share float64
}

type policyKind uint8

const (
	policyClosed policyKind = iota
	policyOpen
	policyLocal
)

// FailClosed makes calls return an error wrapping ErrRedis and the Redis
// error. Nothing is admitted that Redis did not count, so the shared limit
// holds through any outage; callers decide whether to retry. This is the
// default.
func FailClosed() FailurePolicy { return FailurePolicy{kind: policyClosed} }

// FailOpen admits calls without throttling while Redis fails, and logs. Use it
// only where exceeding the quota is cheaper than delaying the call.
func FailOpen() FailurePolicy { return FailurePolicy{kind: policyOpen} }

// FallbackLocal keeps throttling in this process while Redis fails, at share
// of each limit (New's and WithLimit's), rounded down, with the same sliding
// window. With R replicas all cut off, a share of 1/R keeps the total within
// the limit; where the limit is below R that share holds no call, and calls
// fail with ErrRedis while Redis fails, as under FailClosed. Redis is tried
// again at most once a second; calls admitted locally are counted in Redis
// once it answers.
//
// A process cut off from Redis cannot see what the others admit, nor they
// its local calls until they are written back: a window may hold the limit
// plus, for each process that admitted calls locally in it, that process's
// share. This happens in a window that spans the start of an outage, or
// when one process loses Redis while the others still reach it.
func FallbackLocal(share float64) FailurePolicy {
	return FailurePolicy{kind: policyLocal, share: share}
}

func (p FailurePolicy) validate() error {
	if p.kind == policyLocal && !(p.share > 0 && p.share <= 1) {
		return invalidf("FallbackLocal(%v): share must be in (0, 1]", p.share)
	}
	return nil
}

// String describes the policy.
func (p FailurePolicy) String() string {
	switch p.kind {
	case policyOpen:
		return "FailOpen"
	case policyLocal:
		return fmt.Sprintf("FallbackLocal(%g)", p.share)
	default:
		return "FailClosed"
	}
}
