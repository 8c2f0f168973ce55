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

// stopProc cannot freeze a process here: the pause drill is skipped.
func stopProc(cmd *exec.Cmd) error {
	return fmt.Errorf("%w: pausing a process needs SIGSTOP, which %s does not have", ErrUnsupported, runtime.GOOS)
}

// contProc has nothing to resume here.
func contProc(cmd *exec.Cmd) error { return nil }
