package throttler

// WithCompactFrom sets the smallest limit whose window is compacted: from
// it on, a window keeps a sorted-set member only for its newest 2,048
// calls scored within its age (a quarter of the interval plus buffer, at
// most a minute) and counts the others per bucket (1,024 buckets per
// window plus buffer), so a key's memory stops growing with its limit; its
// calls moved into buckets count for no tenant (see ContextWithTenant), so
// a key whose tenants must share keeps a log (0). Every window that
// overlaps a bucket counts all of the bucket's calls, so the guarantee
// stays exact; a saturated key gives up at most a bucket's share
// of its window (0.1%). A call given back (a settled surplus, see
// Permit.Settle, or a call given up after its admission) leaves its bucket
// as it would leave the log, except one given back again after a Redis
// error, which keeps counting until its bucket leaves the window. Default
// 5,000; 0 keeps a member per call whatever the limit (about 100 bytes of
// Redis per call in a large window: docs/design.md, "Compacted windows",
// names the command that measures it). Negative is an error. It applies to every
// window of the Throttler, the one New names and those WithLimit adds.
func WithCompactFrom(limit int) Option {
	return func(o *options) error {
		if limit < 0 {
			return invalidf("WithCompactFrom(%d): limit must not be negative", limit)
		}
		o.compact.from = limit
		return nil
	}
}
