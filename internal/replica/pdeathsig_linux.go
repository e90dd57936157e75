package replica

import (
	"os/exec"
	"syscall"
)

func init() {
	// Should the test binary die without killing its replicas (a test
	// timeout, a crash), the kernel kills them.
	configureCmd = func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
}
