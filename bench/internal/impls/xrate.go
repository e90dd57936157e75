package impls

import "golang.org/x/time/rate"

// newXRate is golang.org/x/time/rate in each process, with no Redis: every
// process gets limit/procs calls per interval, as an even rate with a burst
// of one (a larger burst lets a token bucket put burst + rate·interval calls
// in one window). It needs to know the number of processes, and shares
// nothing: a process that idles leaves its share unused.
func newXRate(cfg Config) Waiter {
	procs := max(cfg.Procs, 1)
	perSecond := float64(cfg.Limit) / float64(procs) / cfg.Interval.Seconds()
	return rate.NewLimiter(rate.Limit(perSecond), 1)
}
