// Package core holds what the throttler decides with, in its own terms and
// without Redis: a limit's window, the members of a sorted set, one round
// trip's attempt and what it read, the values a key keeps beside its calls,
// the news replicas publish, and what a Transport following an API's
// counters asks of the shared window.
//
// It also holds the deciding: the planning of a round (Plan) and the
// resolving of its reply (Resolve), both pure functions; the window
// arithmetic that admits claims and finds the free slots ahead; the rules
// a Throttler plans by (Rules: its limits, the caps of its priorities and
// the timings that follow from its settings); the margin that keeps calls
// to their scores; the estimate of the server's clock (Clock); and the
// bound on the earliest slot a call can get (Earliest).
//
// Nothing here talks to a server; a store (internal/redisstore on
// go-redis, or a test's) applies an Attempt and answers with a Reply.
package core
