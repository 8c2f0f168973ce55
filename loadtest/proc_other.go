//go:build !unix

package main

import (
	"os/exec"
	"syscall"
)

func ownGroup(cmd *exec.Cmd) {}

// signalGroup can only kill the child itself here.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	return cmd.Process.Kill()
}
