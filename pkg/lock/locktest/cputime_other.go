//go:build !unix

package locktest

import "time"

// cpuTime is not measured off Unix; cpu-ms/lock then reads 0.
func cpuTime() time.Duration { return 0 }
