package throttlerotel

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// TenantAttribute is the tenant of a wait (throttler.WaitInfo.Tenant, see
// throttler.ContextWithTenant), on the waits of tenants only: a wait
// without a tenant carries none. On measurements it is bounded (see
// WithMaxTenants): the first tenants each have their own value, and the
// others share OtherTenant. On spans and events, which are one per wait,
// it is the tenant itself, whatever the bound.
const TenantAttribute = attribute.Key("throttler.tenant.id")

// OtherTenant is the value of TenantAttribute on the measurements of the
// tenants past WithMaxTenants' bound. A tenant named "other" adds to the
// same streams.
const OtherTenant = "other"

// DefaultMaxTenants is how many tenants have their own value of
// TenantAttribute on the measurements of one Instrument call when
// WithMaxTenants sets no other bound. Each such tenant adds, per Throttler
// keyed apart, a stream to throttler.tenant.admitted and one per outcome
// to throttler.wait.duration (a histogram of 17 buckets), hence a bound
// smaller than the library's Stats keeps (100).
const DefaultMaxTenants = 20

// WithMaxTenants sets how many tenants have their own value of
// TenantAttribute on measurements: the first max tenants whose waits the
// Instrument call records (a Group's Throttlers share them), for as long
// as the instrumentation lasts; the measurements of any other tenant
// carry OtherTenant. They are never given to another tenant later, even
// when idle: an SDK keeps a cumulative stream for every set of attributes
// it has seen, so that the streams of one Instrument call's tenants are
// at most max+1 (times those of the key and the outcome), however many
// tenants come and go. 0 records every tenant's waits as OtherTenant.
// Default DefaultMaxTenants. A negative max is invalid.
func WithMaxTenants(max int) Option {
	return func(c *config) error {
		if max < 0 {
			return invalidf("WithMaxTenants(%d): negative", max)
		}
		c.maxTenants = max
		return nil
	}
}

// tenantValues gives the tenants of one Instrument call their values of
// TenantAttribute on measurements: their own to the first max, OtherTenant
// to the others.
type tenantValues struct {
	max int
	own sync.Map     // the tenants with their own value
	n   atomic.Int64 // how many own holds
	mu  sync.Mutex   // taken to add to own
}

// valueOf returns the value of TenantAttribute on the measurements of
// tenant's waits.
func (tv *tenantValues) valueOf(tenant string) string {
	if _, ok := tv.own.Load(tenant); ok {
		return tenant
	}
	if tv.n.Load() >= int64(tv.max) {
		return OtherTenant
	}
	tv.mu.Lock()
	defer tv.mu.Unlock()
	if _, ok := tv.own.Load(tenant); ok {
		return tenant
	}
	if tv.n.Load() >= int64(tv.max) {
		return OtherTenant
	}
	// A tenant named by a slice of a larger string must not keep it alive.
	tv.own.Store(strings.Clone(tenant), struct{}{})
	tv.n.Add(1)
	return tenant
}

// tenantAttrs are the measurement attributes of one Throttler's waits of
// one value of TenantAttribute, made once.
type tenantAttrs struct {
	base    metric.MeasurementOption
	outcome [numOutcomes]metric.MeasurementOption
}

// forTenant returns the measurement attributes of ma's waits whose
// TenantAttribute is value, made at its first wait.
func (ma *metricAttrs) forTenant(value string) *tenantAttrs {
	if ta, ok := ma.tenants.Load(value); ok {
		return ta.(*tenantAttrs)
	}
	kv := append(ma.kv, TenantAttribute.String(value)) // ma.kv is full: a copy
	ta := &tenantAttrs{
		base:    metric.WithAttributeSet(attribute.NewSet(slices.Clone(kv)...)),
		outcome: outcomeAttrs(kv),
	}
	stored, _ := ma.tenants.LoadOrStore(value, ta)
	return stored.(*tenantAttrs)
}
