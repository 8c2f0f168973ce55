package mongolock_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/mongolock"
)

// Benchmarks run against devstore's MongoDB (the embedded FerretDB behind
// its write gate unless MONGO_URI is set). Each reports, besides ns/op:
//
//	locks/s      lock/release cycles completed per second of wall time
//	p50-wait-ms  median time an Acquire call blocked
//	p99-wait-ms  99th percentile of the same
//
// Run without the race detector:
//
//	go test -run '^$' -bench . -benchtime 200x ./pkg/lock/mongolock

// BenchmarkUncontended: one goroutine takes and releases one key: the cost
// of a lock cycle (a read, the grant, the release) with nobody in the way.
func BenchmarkUncontended(b *testing.B) {
	locker := benchLocker(b)
	ctx := b.Context()
	waits := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t0 := time.Now()
		lease, err := locker.Acquire(ctx, "bench-uncontended")
		if err != nil {
			b.Fatal(err)
		}
		waits = append(waits, time.Since(t0))
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	report(b, time.Since(start), waits)
}

// BenchmarkContended8: 8 goroutines of one process take turns on one key,
// each incrementing an unsynchronised counter inside the critical section;
// the counter must come out exact.
func BenchmarkContended8(b *testing.B) {
	const goroutines = 8
	locker := benchLocker(b)
	ctx := b.Context()
	var (
		counter int // protected by the lock alone
		next    atomic.Int64
		mu      sync.Mutex
		waits   = make([]time.Duration, 0, b.N)
		wg      sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for range goroutines {
		wg.Go(func() {
			var mine []time.Duration
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				lease, err := locker.Acquire(ctx, "bench-contended")
				if err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
				counter++
				if err := lease.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
			mu.Lock()
			waits = append(waits, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if counter != b.N {
		b.Fatalf("counter = %d after %d lock cycles: two goroutines held the lock at once", counter, b.N)
	}
	report(b, elapsed, waits)
}

func benchLocker(b *testing.B) *lock.Locker {
	b.Helper()
	s := newStore(b)
	coll := locks(b, s.URI, dbName(b))
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

func report(b *testing.B, elapsed time.Duration, waits []time.Duration) {
	if len(waits) == 0 {
		return
	}
	slices.Sort(waits)
	pct := func(p float64) float64 {
		return float64(waits[int(p*float64(len(waits)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(len(waits))/elapsed.Seconds(), "locks/s")
	b.ReportMetric(pct(0.50), "p50-wait-ms")
	b.ReportMetric(pct(0.99), "p99-wait-ms")
}
