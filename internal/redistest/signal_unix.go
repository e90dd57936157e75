//go:build unix

package redistest

import "syscall"

// The signals behind Pause and Resume.
var sigStop, sigCont = syscall.SIGSTOP, syscall.SIGCONT
