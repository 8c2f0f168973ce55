//go:build unix

package env

import (
	"os/exec"
	"syscall"
)

// signalGroup sends sig to the child's whole process group.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// stopProc freezes the child's process group (SIGSTOP): it keeps its
// sockets and its memory, and does nothing until contProc.
func stopProc(cmd *exec.Cmd) error { return signalGroup(cmd, syscall.SIGSTOP) }

// contProc lets a frozen process group run on (SIGCONT).
func contProc(cmd *exec.Cmd) error { return signalGroup(cmd, syscall.SIGCONT) }
