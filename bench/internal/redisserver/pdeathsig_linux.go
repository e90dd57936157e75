package redisserver

import (
	"os/exec"
	"syscall"
)

// configure makes the kernel kill the server should the harness die without
// stopping it.
func configure(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// Configure applies the same to another child process (the replicas).
func Configure(cmd *exec.Cmd) { configure(cmd) }
