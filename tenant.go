package throttler

import (
	"context"
	"math"
)

// A tenant is whoever a call is made for, when one quota serves many: the
// customer behind a chat completion made with the service's one
// organisation key, the installation behind a sync made with one App
// token. A call's tenant comes from its context (see ContextWithTenant),
// so that Wait, Do, Wrap, Acquire and the Transport all carry it; a
// Transport may also name each request's tenant itself (Transport.Tenant).
//
// Within one process, the calls of one priority that wait are served in a
// fair order across their tenants: start-time fair queuing, in units (a
// WaitN of n counts n), by each tenant's weight (WithTenantWeight). A
// tenant that queues one call behind a flood of another's is served next,
// not after the flood; a tenant alone is served as without tenants. Calls
// without a tenant are the tenant "" here.
//
// Across replicas, a tenant whose calls wait behind its own (backlogged)
// is held to a fair share of each window, counted in Redis with its claims
// in the same round trip: the backlogged tenants share by weight what the
// other tenants use of the limit, less a spare left free for those tenants'
// next calls. A tenant alone, or tenants that all get what they ask, are
// held to nothing; the limit holds whatever the tenants. The share is
// counted on the calls of the first limit's key while they are kept as
// members (a compacted window's older calls are not counted), and calls
// without a tenant take no part. Redis keeps nothing per tenant but 17
// bytes on each of its calls' members. See docs/design.md, "Tenants".
//
// Priorities come first in each process's queue: a higher priority's calls
// queue ahead of every tenant's, and the tenants share within a priority.
// A tenant held to its share waits for the room its share leaves, whatever
// its calls' priority, in every process: its high-priority call may go
// after another tenant's normal one.
//
// What each tenant was admitted, and how long its calls waited, is this
// process's to count: Stats.Tenants, for at most 100 tenants at a time
// (see TenantStats and tenantstats.go), and WaitInfo.Tenant for an
// Observer of every wait.

type tenantKey struct{}

// ContextWithTenant returns a copy of ctx that carries tenant: calls made
// with it (Wait, Do, Wrap, Acquire, requests through a Transport) are that
// tenant's, served in a fair order within the process and held to a fair
// share across replicas while the tenant is backlogged (see the notes at
// the top of tenant.go).
func ContextWithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFromContext returns the tenant ctx carries, and whether
// ContextWithTenant set one: "" and false unless it did.
func TenantFromContext(ctx context.Context) (tenant string, ok bool) {
	tenant, ok = ctx.Value(tenantKey{}).(string)
	return tenant, ok
}

// WithTenantWeight sets each tenant's weight: while several tenants have
// calls waiting, each is served in proportion to its weight, so that a
// tenant of weight 2 is given twice the calls (in units) of one of weight
// 1, in the process's order and in the shares across replicas (the weight
// rides with each call's member, at most 999.999). weight is called once
// per call, as it begins: it must be quick and must not call the
// Throttler. A weight that is not a positive finite number counts as 1.
// Every Throttler on the key should weigh tenants alike. Default: every
// tenant weighs 1. weight must not be nil (New checks).
func WithTenantWeight(weight func(tenant string) float64) Option {
	return func(o *options) error {
		if weight == nil {
			return invalidf("WithTenantWeight: weight is nil")
		}
		o.order.weight = weight
		return nil
	}
}

// weightOf is the weight fn gives tenant, 1 when fn is nil or gives no
// positive finite number.
func weightOf(fn func(string) float64, tenant string) float64 {
	if fn == nil {
		return 1
	}
	if w := fn(tenant); w > 0 && !math.IsInf(w, 1) {
		return w
	}
	return 1
}
