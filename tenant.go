package throttler

import (
	"context"
	"log/slog"
	"math"
)

// Tenants: see the package documentation, "Tenants", and
// docs/design.md. This file holds the faces (ContextWithTenant,
// TenantFromContext, WithTenantWeight); tenants.go the rider that holds
// backlogged tenants to their shares across replicas, fairqueue.go the
// fair order within a process, tenantstats.go what Stats counts per
// tenant.

type tenantKey struct{}

// ContextWithTenant returns a copy of ctx that carries tenant: calls made
// with it (Wait, WaitN, Do, DoCost, Wrap, WrapCost, Acquire, whose
// Permit's settle counts for the same tenant, requests through a
// Transport, calls through throttlergrpc's interceptors) are that tenant's, served in a fair order within the process
// and held to a fair share across replicas while the tenant is backlogged
// (see the package documentation, "Tenants"). The empty tenant is no tenant:
// ContextWithTenant(ctx, "") returns a context whose calls are of no
// tenant, whatever ctx carried and whatever a Transport's Tenant would
// name. A nil ctx counts as context.Background().
// AllowN does not take part: an attempt that may not wait is counted as
// a call of no tenant (under WithShadow, every call, AllowN's too, is
// claimed as its tenant's).
func ContextWithTenant(ctx context.Context, tenant string) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFromContext returns the tenant ctx carries, and whether it carries
// one: "" and false unless ContextWithTenant set a tenant other than ""
// (a nil ctx carries none).
func TenantFromContext(ctx context.Context) (tenant string, ok bool) {
	if ctx == nil {
		return "", false
	}
	tenant, _ = ctx.Value(tenantKey{}).(string)
	return tenant, tenant != ""
}

// tenantSet reports whether ctx was given a tenant by ContextWithTenant,
// the empty tenant included (a nil ctx was given none).
func tenantSet(ctx context.Context) bool {
	if ctx == nil {
		return false
	}
	_, set := ctx.Value(tenantKey{}).(string)
	return set
}

// WithTenantWeight sets each tenant's weight: while several tenants have
// calls waiting, each is served in proportion to its weight, so that a
// tenant of weight 2 is given twice the calls (in units) of one of weight
// 1, in the process's order and in the shares across replicas (the weight
// rides with each call's member). A weight counts in thousandths, from
// 0.001 to 999.999: it is rounded to the nearest thousandth and held to
// that range, alike in the process and in Redis; one that is not a
// positive finite number counts as 1. weight is called at least once for
// each call that carries a tenant, as it joins the queue, and again when
// Acquire, Do or a Transport reserves anew for it (woken too late for its
// slot, or given a new slot at its connection), and when a late send adds
// debt for a call whose members carry no tenant (admitted without Redis);
// a settle's debt carries the weight its call's members carry. Not for
// AllowN's calls, which have none but under WithShadow. It must be quick and must not call the Throttler. Every
// Throttler on the key should weigh tenants alike. Default: every tenant
// weighs 1. weight must not be nil (New checks). The shares count the
// first window's members: New logs a warning (WithLogger) when that
// window is compacted (WithCompactFrom, from a limit of 5,000 by
// default), whose older calls count for no tenant.
func WithTenantWeight(weight func(tenant string) float64) Option {
	return func(o *options) error {
		if weight == nil {
			return invalidf("WithTenantWeight: weight is nil")
		}
		o.order.weight = weight
		return nil
	}
}

// warnCompactedShares logs, once as New returns, that the weighted
// shares c asks for cannot hold across replicas: its first window is
// compacted (WithCompactFrom), and the shares count only that window's
// members, which a compaction moves into buckets of no tenant. Calls of
// tenants still go in each process's fair order.
func warnCompactedShares(c *config) {
	if w := c.rules.Wins[0]; c.opt.order.weight != nil && w.Bucket > 0 {
		c.opt.logger.Warn("throttler: WithTenantWeight on a compacted window: the tenants' shares count only its newest calls and do not hold across replicas; keep the window a log with WithCompactFrom(0)",
			slog.String("key", w.Key), slog.Int("limit", w.Limit))
	}
}

// Weights count in thousandths, as a member's mark carries them (see
// redisstore.TenantSuffix).
const (
	minWeight = 0.001
	maxWeight = 999.999
)

// weightOf is the weight fn gives tenant, rounded to thousandths within
// [minWeight, maxWeight]; 1 when fn is nil or gives no positive finite
// number.
func weightOf(fn func(string) float64, tenant string) float64 {
	if fn == nil {
		return 1
	}
	if w := fn(tenant); w > 0 && !math.IsInf(w, 1) {
		return min(max(math.Round(w*1000)/1000, minWeight), maxWeight)
	}
	return 1
}
