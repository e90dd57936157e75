// Package core holds what the throttler decides with, in its own terms and
// without Redis: a limit's window, the members of a sorted set, one round
// trip's attempt and what it read, the values a key keeps beside its calls,
// the news replicas publish, and what a Transport following an API's
// counters asks of the shared window. Nothing here talks to a server; a
// store (internal/redisstore on go-redis, or a test's) applies an Attempt
// and answers with a Reply.
package core
