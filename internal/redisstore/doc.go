// Package redisstore is the throttler's only route to Redis: it applies
// the core's attempts as pipelines and transactions on a go-redis client,
// holds the Lua scripts (places in flight, an API's counters, the
// published margin), encodes what a key keeps beside its calls as members
// with negated scores, publishes and subscribes to news and wakes, and
// bounds every call but a subscription by its context's deadline, give or
// take one socket write and read where the client's own timeouts end it
// (see Store.inline).
//
// The layout of a key: calls are members scored by the server time (µs)
// they are admitted at; the members that are not calls (Marker,
// PauseMember, LimitMember, ...) have negative scores, where no window
// counts them and no trim reaches them.
package redisstore
