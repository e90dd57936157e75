package throttlergrpc

import (
	"context"
	"sync"
	"time"

	"github.com/go-throttler/throttler"
)

// limits remembers, per Throttler, the last limit an interceptor wrote
// from the API's answers, so that a limit every response repeats costs a
// Redis write only when it changes what is in force, or the lowering is
// past half its time (see WithLimitMetadata). It forgets everything past
// maxRemembered Throttlers (a Group's come and go): forgetting costs one
// write more, never a wrong limit.
type limits struct {
	mu   sync.Mutex
	seen map[*throttler.Throttler]limitSeen
}

// limitSeen is what an interceptor wrote for one Throttler: the lowered
// limit (0 after it ended one) and when, and when it last checked, through
// Stats, whether another replica's lowering is in force.
type limitSeen struct {
	n                int
	written, checked time.Time
}

const (
	maxRemembered = 1024
	// checkEvery bounds how often a response stating at least the
	// Throttler's limit reads Stats to see whether a lowering is in force.
	checkEvery = time.Second
)

// follow lowers th's limit for every replica to n, the API's, for d; or,
// n being at least th's own limit, ends a lowering in force.
func (l *limits) follow(ctx context.Context, th *throttler.Throttler, n int, d time.Duration) {
	now := time.Now()
	l.mu.Lock()
	if l.seen == nil || len(l.seen) >= maxRemembered {
		l.seen = make(map[*throttler.Throttler]limitSeen)
	}
	s := l.seen[th]
	write := false
	switch {
	case n < th.Limit():
		write = s.n != n || now.Sub(s.written) > d/2
		if write {
			s.n, s.written = n, now
		}
	case s.n > 0:
		write, s.n, s.written = true, 0, now // ours to end
	case now.Sub(s.checked) >= checkEvery:
		// Another replica's, perhaps: Stats takes no Redis round trip.
		s.checked = now
		write = th.Stats().LimitNow < th.Limit()
	}
	l.seen[th] = s
	l.mu.Unlock()
	if write {
		_ = th.LowerLimit(ctx, n, d) // n at or above the limit ends a lowering; a failure is th's to log
	}
}
