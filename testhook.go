package throttler

import "github.com/go-throttler/throttler/internal/testhook"

// The hooks the throttlertest package uses (see internal/testhook).
func init() {
	testhook.Idle = func(th any) bool {
		t := th.(*Throttler)
		t.mu.Lock()
		defer t.mu.Unlock()
		return !t.worker.running && !t.news.running
	}
}
