//go:build unix && !linux

package env

import (
	"os/exec"
	"syscall"
)

// ownGroup puts the child in its own process group, so that stopping it
// also stops anything it started.
func ownGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }
