package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-throttler/throttler"
)

// timeLayout is how absolute times are printed, on the local clock.
const timeLayout = "2006-01-02 15:04:05.000 MST"

// status prints one block per limit of cfg.
func (c *cli) status(ctx context.Context, t *throttler.Throttler, cfg *config) error {
	us, err := t.Usage(ctx)
	if err != nil {
		return err
	}
	writeStatus(c.stdout, us, configured(cfg), cfg.buffer, c.now())
	if cfg.inflightKey != "" {
		taken, n, err := t.InFlight(ctx)
		if err != nil {
			return err
		}
		writeInFlight(c.stdout, cfg.inflightKey, taken, n)
	}
	return nil
}

// writeInFlight writes the block of the places in flight:
//
//	{gh}:inflight
//	  in flight  3/10
func writeInFlight(w io.Writer, key string, taken, n int) {
	fmt.Fprintf(w, "\n%s\n  in flight  %d/%d\n", key, taken, n)
}

// configured returns the limits as given on the command line, in the order
// Usage reports them.
func configured(cfg *config) []int {
	lims := []int{cfg.limit}
	for _, l := range cfg.also {
		lims = append(lims, l.limit)
	}
	return lims
}

// writeStatus writes one block per usage, separated by blank lines. limits
// are the configured limits (to show one lowered through Redis); now is the
// local time the durations are counted from. A compacted window (a limit
// of 5,000 or more: see Usage.Bucket) has one more line, after reserved:
// "compacted  older calls counted per bucket of 3.5s".
//
//	github-api
//	  used       45/100 in the last 1s (+50ms buffer)
//	  debt       0 of the used (settled above their estimate)
//	  reserved   3
//	  next free  in 230ms (2025-01-02 15:04:05.230 UTC)
//	  paused     no
func writeStatus(w io.Writer, us []throttler.Usage, limits []int, buffer time.Duration, now time.Time) {
	var b strings.Builder
	for i, u := range us {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s\n", u.Key)
		fmt.Fprintf(&b, "  used       %d/%d in the last %s (+%s buffer)%s\n",
			u.Used, u.Limit, u.Interval, buffer, lowered(u, limits, i))
		fmt.Fprintf(&b, "  debt       %d of the used (settled above their estimate)\n", u.Debt)
		fmt.Fprintf(&b, "  reserved   %d\n", u.Reserved)
		if u.Bucket > 0 {
			fmt.Fprintf(&b, "  compacted  older calls counted per bucket of %s\n", round(u.Bucket))
		}
		fmt.Fprintf(&b, "  next free  %s (%s)\n", fromNow(u.NextFree, now), u.NextFree.Format(timeLayout))
		if paused(u, now) {
			fmt.Fprintf(&b, "  paused     until %s (%s left)\n",
				u.PausedUntil.Format(timeLayout), round(u.PausedUntil.Sub(now)))
		} else {
			b.WriteString("  paused     no\n")
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// lowered notes a limit lowered below the configured one (LowerLimit).
func lowered(u throttler.Usage, limits []int, i int) string {
	if i < len(limits) && u.Limit < limits[i] {
		return fmt.Sprintf(", limit lowered from %d", limits[i])
	}
	return ""
}

// paused reports whether a shared pause is in force at now.
func paused(u throttler.Usage, now time.Time) bool {
	return !u.PausedUntil.IsZero() && u.PausedUntil.Sub(now) >= time.Millisecond
}

// fromNow says when t comes, counted from now: "now" or "in 230ms".
func fromNow(t, now time.Time) string {
	d := t.Sub(now)
	if d < time.Millisecond {
		return "now"
	}
	return "in " + round(d).String()
}

// round rounds d for reading: to the millisecond below a second, to 100ms
// below a minute, else to the second.
func round(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Second)
	}
}
