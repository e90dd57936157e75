package redistest

import (
	"os/exec"
	"syscall"
)

func init() {
	// Should the test binary die without running its cleanups (a test
	// timeout, a crash), the kernel kills the servers it started.
	configureCmd = func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
}
