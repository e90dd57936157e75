// Package testhook lets the throttlertest package ask the throttler package
// what it does not export. The throttler package sets each hook in its
// init; nothing else may.
package testhook

// Idle reports whether th, a *throttler.Throttler, runs no goroutine: its
// worker and its news listener have exited, and nothing it had to give
// back is in flight.
var Idle func(th any) bool
