package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-throttler/throttler"
)

// barWidth is the number of cells in a watch bar.
const barWidth = 20

// watch redraws one line per limit of cfg every cfg.every, until ctx ends
// (an interrupt) or cfg.count redraws are done. An interrupt is not an
// error; a Redis failure ends the watch with it.
func (c *cli) watch(ctx context.Context, t *throttler.Throttler, cfg *config) error {
	tick := time.NewTicker(cfg.every)
	defer tick.Stop()
	s := screen{w: c.stdout}
	defer s.end()
	for n := 1; ; n++ {
		us, err := t.Usage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted during the read
			}
			return err
		}
		now := c.now()
		lines := make([]string, len(us))
		for i, u := range us {
			lines[i] = barLine(u, now)
		}
		s.draw(lines)
		if cfg.count > 0 && n >= cfg.count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// barLine is one limit's state on one line:
//
//	github-api [#########...........] 45/100 reserved 3 next free now  paused -
func barLine(u throttler.Usage, now time.Time) string {
	pause := "-"
	if paused(u, now) {
		pause = "for " + round(u.PausedUntil.Sub(now)).String()
	}
	return fmt.Sprintf("%s [%s] %d/%d reserved %d next free %s  paused %s",
		u.Key, bar(u.Used, u.Limit), u.Used, u.Limit, u.Reserved, fromNow(u.NextFree, now), pause)
}

// bar draws used out of limit in barWidth cells, rounding up so that any use
// shows.
func bar(used, limit int) string {
	filled := barWidth
	if used < limit {
		filled = (used*barWidth + limit - 1) / limit
	}
	filled = max(filled, 0)
	return strings.Repeat("#", filled) + strings.Repeat(".", barWidth-filled)
}

// screen redraws a block of lines in place: "\r" and the line, padded with
// spaces over what the previous draw left. A block of more than one line
// first moves the cursor back up with an ANSI escape.
type screen struct {
	w      io.Writer
	widths []int // the width of each line last drawn
}

func (s *screen) draw(lines []string) {
	var b strings.Builder
	if len(s.widths) > 1 {
		fmt.Fprintf(&b, "\x1b[%dA", len(s.widths)-1)
	}
	widths := make([]int, len(lines))
	for i, line := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteByte('\r')
		b.WriteString(line)
		widths[i] = utf8.RuneCountInString(line)
		if i < len(s.widths) && s.widths[i] > widths[i] {
			b.WriteString(strings.Repeat(" ", s.widths[i]-widths[i]))
		}
	}
	s.widths = widths
	_, _ = io.WriteString(s.w, b.String())
}

// end moves past the block, if one was drawn, so that what follows starts on
// a line of its own.
func (s *screen) end() {
	if len(s.widths) > 0 {
		_, _ = io.WriteString(s.w, "\n")
	}
}
