package env

import (
	"os/exec"
	"syscall"
)

// ownGroup puts the child in its own process group, so that stopping it
// also stops anything it started, and asks the kernel to kill it should
// the harness die without cleaning up.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
