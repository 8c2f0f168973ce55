package locallock_test

import (
	"testing"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/locallock"
	"github.com/stocklock/stocklock/pkg/lock/locktest"
)

func TestConformance(t *testing.T) {
	// One table shared by every "process" of the suite: within one process
	// the local lock is a real lock. (Across processes it is not, which is
	// the point of the stock service's "local" strategy.)
	b := locallock.New()
	locktest.Run(t, locktest.Harness{Backend: func(*testing.T) lock.Backend { return b }})
}
