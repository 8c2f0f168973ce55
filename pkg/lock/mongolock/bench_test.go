package mongolock_test

import (
	"slices"
	"testing"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/locktest"
	"github.com/stocklock/stocklock/pkg/lock/mongolock"
)

// Benchmarks run against devstore's MongoDB (the embedded FerretDB behind
// its write gate unless MONGO_URI is set). Each reports, besides ns/op:
//
//	locks/s      lock/release cycles completed per second of wall time
//	p50-wait-ms  median time an Acquire call blocked
//	p99-wait-ms  99th percentile of the same
//	cpu-ms/lock  CPU of the whole process (the store included) per cycle
//
// Run without the race detector:
//
//	go test -run '^$' -bench . -benchtime 200x ./pkg/lock/mongolock

// BenchmarkUncontended: one goroutine takes and releases one key: the cost
// of a lock cycle (a read, the grant, the release) with nobody in the way.
func BenchmarkUncontended(b *testing.B) {
	locktest.BenchUncontended(b, locktest.LockerMutex{Locker: benchLocker(b), Key: "bench-uncontended"})
}

// BenchmarkContended8: 8 goroutines of one process take turns on one key,
// each incrementing an unsynchronised counter inside the critical section;
// the counter must come out exact.
func BenchmarkContended8(b *testing.B) {
	m := locktest.LockerMutex{Locker: benchLocker(b), Key: "bench-contended"}
	locktest.BenchContended(b, slices.Repeat([]locktest.Mutex{m}, 8))
}

func benchLocker(b *testing.B) *lock.Locker {
	b.Helper()
	coll := locks(b, mongoURI(), dbName(b))
	locker, err := mongolock.NewLocker(coll)
	if err != nil {
		b.Fatal(err)
	}
	// Open the connection before timing: the first request waits for the
	// handshake.
	lease, err := locker.Acquire(b.Context(), "warm-up")
	if err != nil {
		b.Fatal(err)
	}
	if err := lease.Release(b.Context()); err != nil {
		b.Fatal(err)
	}
	return locker
}
