// Package sim is the world the throttler's simulation tests run the real
// library in: replicas, their clocks and connections, one Redis, and the
// faults between and inside them, all in one process and in virtual time.
//
// The tests run each seed inside a testing/synctest bubble: every goroutine
// (the library's workers, go-redis's, miniredis's and the callers') shares
// the bubble's clock, which jumps ahead whenever all of them are blocked, so
// hours of traffic take seconds. go-redis reaches miniredis through a
// Dialer that returns this package's connections, in-memory pipes on which
// Network injects delays, stalls and cuts; Store adds data loss (a restart
// empty, a failover to a stale copy); Clock skews and steps a replica's
// local clock (WithClock); API is the third-party API that HTTP callers'
// requests reach, through a transport that may take its time to set up
// a connection before the write. Generate draws a seed's Scenario;
// Recorder keeps what callers were admitted and a trace, and Overfull
// checks the sliding-window invariant over it (OverfullAtAPI, over the
// calls' arrivals at the API).
//
// Nothing here changes the library: it is driven through its public API
// plus the test hooks its own tests use (simulation_test.go in the root
// package).
package sim
