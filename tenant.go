package throttler

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"
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
// slot, or given a new slot at its connection) or a late send adds debt
// for it; a settle's debt carries the weight its call's members carry.
// Not for AllowN's calls, which have none but under WithShadow. It must
// be quick and must not call the Throttler. Every Throttler on the key
// should weigh tenants alike. Default: every tenant
// weighs 1. weight must not be nil (New checks).
func WithTenantWeight(weight func(tenant string) float64) Option {
	return func(o *options) error {
		if weight == nil {
			return invalidf("WithTenantWeight: weight is nil")
		}
		o.order.weight = weight
		return nil
	}
}

// compactedShares warns, once for every Throttler that shares it (a
// Group's Throttlers share one), that calls of tenants meet a compacted
// first window (WithCompactFrom), where their shares cannot hold across
// replicas: the shares count only the window's members, and a compaction
// moves the older calls into buckets of no tenant. The calls still go in
// each process's fair order.
type compactedShares struct{ warned atomic.Bool }

// withCompactedShares makes the Throttler warn through s, its Group's, so
// that a Group warns once however many Throttlers it makes.
func withCompactedShares(s *compactedShares) Option {
	return func(o *options) error {
		o.compacted = s
		return nil
	}
}

// compactedWarning returns what rankOf calls for each call of a tenant
// (see orderOptions.compacted): nil when c's first window is a log.
func (c *config) compactedWarning() func() {
	w, logger, s := c.rules.Wins[0], c.opt.logger, c.opt.compacted
	if w.Bucket == 0 {
		return nil
	}
	if s == nil {
		s = new(compactedShares)
	}
	return func() {
		if !s.warned.Load() && s.warned.CompareAndSwap(false, true) {
			logger.Warn("throttler: calls of tenants on a compacted window: their shares count only its newest calls and do not hold across replicas; keep the window a log with WithCompactFrom(0)",
				slog.String("key", w.Key), slog.Int("limit", w.Limit))
		}
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
