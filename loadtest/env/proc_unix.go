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

// Pause freezes replica i's process group (SIGSTOP): it keeps its sockets
// and memory and does nothing until Resume.
func (e *Env) Pause(i int) error { return signalGroup(e.procs[i].cmd, syscall.SIGSTOP) }

// Resume lets a paused replica run on (SIGCONT).
func (e *Env) Resume(i int) error { return signalGroup(e.procs[i].cmd, syscall.SIGCONT) }
