//go:build unix

package locktest

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user and system) this process has used so
// far: an embedded server's and the clients'. On a shared machine it says
// more about a lock's cost than the wall clock does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
