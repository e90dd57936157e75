//go:build !linux

package redisserver

import "os/exec"

func configure(*exec.Cmd) {}

// Configure is a no-op outside Linux.
func Configure(*exec.Cmd) {}
