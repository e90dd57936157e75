package throttler

import (
	"context"
	"math"
)

// A tenant is whoever a call is made for, when one quota serves many: the
// customer behind a chat completion made with the service's one
// organisation key, the installation behind a sync made with one App
// token. A call's tenant comes from its context (see ContextWithTenant),
// so that Wait, Do, Wrap, Reserve and the Transport all carry it; a
// Transport may also name each request's tenant itself (Transport.Tenant).
//
// Within one process, the calls of one priority that wait are served in a
// fair order across their tenants: start-time fair queuing, in units (a
// WaitN of n counts n), by each tenant's weight (WithTenantWeight). A
// tenant that queues one call behind a flood of another's is served next,
// not after the flood; a tenant alone is served as without tenants. Calls
// without a tenant are the tenant "".

type tenantKey struct{}

// ContextWithTenant returns a copy of ctx that carries tenant: calls made
// with it (Wait, Do, Wrap, Reserve, requests through a Transport) are that
// tenant's (see the package's "tenant" notes above WithTenantWeight). The
// empty tenant is that of calls without one.
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
// 1. weight is called once per call that joins the queue, with the
// Throttler's lock held: it must be quick and must not call the
// Throttler. A weight that is not a positive finite number counts as 1.
// Default: every tenant weighs 1. weight must not be nil (New checks).
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
