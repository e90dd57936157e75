package redistest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// LeakGrace is how long VerifyTestMain lets goroutines run on after the
// tests before it calls them leaked: a Throttler's worker that sleeps
// after a failed round trip (a second) or gives back again a member a
// clock step scored far ahead (every 500ms) sees that the test closed its
// client only at its next round trip, and then exits, as the package's
// documentation says. goleak's own retries last about 0.4s, less than
// that sleep (the throttlerotel module's run failed so in CI once).
const LeakGrace = 3 * time.Second

// VerifyTestMain runs m's tests and exits with their code, or 1 when
// goroutines are still running LeakGrace after they ended (see
// goleak.Find).
func VerifyTestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(LeakGrace)
		for err := goleak.Find(); err != nil; err = goleak.Find() {
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goroutines still running %s after the tests ended: %v\n", LeakGrace, err)
				code = 1
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	os.Exit(code)
}
