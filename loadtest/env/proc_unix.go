//go:build unix && !linux

package env

import (
	"os/exec"
	"syscall"
)

// ownGroup puts the child in its own process group, so that stopping it
// also stops anything it started.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to the child's whole process group.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// stopProc freezes the child's process group (SIGSTOP): it keeps its
// sockets and its memory, and does nothing until contProc.
func stopProc(cmd *exec.Cmd) error { return signalGroup(cmd, syscall.SIGSTOP) }

// contProc lets a frozen process group run on (SIGCONT).
func contProc(cmd *exec.Cmd) error { return signalGroup(cmd, syscall.SIGCONT) }
