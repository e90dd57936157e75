//go:build !unix

package redistest

import "os"

// Pause and Resume are not available here: they skip the test.
var sigStop, sigCont os.Signal
