//go:build !unix

package env

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
)

func ownGroup(cmd *exec.Cmd) {}

// signalGroup can only kill the child itself here; it refuses any other
// signal rather than kill on a request to stop.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if sig != syscall.SIGKILL && sig != syscall.SIGTERM {
		return fmt.Errorf("signal %v: %w: only kill is supported on %s", sig, ErrUnsupported, runtime.GOOS)
	}
	return cmd.Process.Kill()
}

// Pause cannot freeze a replica here: the pause drill is skipped.
func (e *Env) Pause(int) error {
	return fmt.Errorf("%w: pausing a process needs SIGSTOP, which %s does not have", ErrUnsupported, runtime.GOOS)
}

// Resume has nothing to resume here.
func (e *Env) Resume(int) error { return nil }
