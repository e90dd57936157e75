//go:build race

package throttler

// raceEnabled reports a test binary built with -race.
const raceEnabled = true
