package impls

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/time/rate"
)

// newXRate is golang.org/x/time/rate in each process, with no Redis: every
// process gets limit/procs calls per interval, as an even rate with a burst
// of one (a larger burst lets a token bucket put burst + rate·interval calls
// in one window). It needs to know the number of processes, and shares
// nothing: a process that idles leaves its share unused.
func newXRate(cfg Config) Waiter {
	procs := max(cfg.Procs, 1)
	perSecond := float64(cfg.Limit) / float64(procs) / cfg.Interval.Seconds()
	return xrate{rate.NewLimiter(rate.Limit(perSecond), 1)}
}

// xrate is a rate.Limiter whose refusal of a wait that would end after the
// context's deadline is context.DeadlineExceeded to errors.Is, as the other
// implementations' is (rate returns a plain error then; its only other
// error, n above the burst, cannot happen with a burst of one and Wait).
type xrate struct{ l *rate.Limiter }

func (x xrate) Wait(ctx context.Context) error {
	err := x.l.Wait(ctx)
	if err == nil || errors.Is(err, ctx.Err()) {
		return err // admitted, or the context ended while it waited
	}
	if _, ok := ctx.Deadline(); ok {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}
