//go:build unix

package storeproc

import (
	"os/exec"
	"syscall"
)

// ownGroup puts the child in a process group of its own.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }
