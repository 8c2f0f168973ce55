package locktest

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/lock"
)

// benchTimeout bounds one benchmark's lock calls, so that a wedged lock
// fails the run instead of hanging it.
const benchTimeout = 5 * time.Minute

// Mutex is one contender's view of a lock under benchmark, ours or a peer
// library's. Acquire blocks until the lock is held and returns its release
// and, for a queue lock, the grant's place in the queue (0 otherwise).
type Mutex interface {
	Acquire(ctx context.Context) (release func(context.Context) error, order int64, err error)
}

// LockerMutex is a Mutex on one key of a lock.Locker.
type LockerMutex struct {
	Locker *lock.Locker
	Key    string
}

// Acquire implements Mutex.
func (m LockerMutex) Acquire(ctx context.Context) (func(context.Context) error, int64, error) {
	lease, err := m.Locker.Acquire(ctx, m.Key)
	if err != nil {
		return nil, 0, err
	}
	return lease.Release, 0, nil
}

// BenchUncontended takes and releases m in a loop from one goroutine: the
// cost of a lock cycle with nobody in the way. It reports locks/s,
// p50-wait-ms, p99-wait-ms, cpu-ms/lock (the CPU of the whole process,
// an embedded server included) and allocs/op, the allocations per lock
// cycle of the whole process.
func BenchUncontended(b *testing.B, m Mutex) Metrics {
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	var waits []time.Duration
	b.ReportAllocs()
	start, cpu0 := time.Now(), cpuTime()
	for b.Loop() {
		t0 := time.Now()
		release, _, err := m.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		waits = append(waits, time.Since(t0))
		if err := release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return report(b, time.Since(start), cpuTime()-cpu0, waits)
}

// BenchContended runs one goroutine per element of ms (the same Mutex may
// appear more than once, for goroutines that share one), taking the lock in
// turn b.N times in all, each holding it for an unsynchronised increment of
// a shared counter. It fails the benchmark if two holders are ever inside at
// once or the counter comes out wrong. Besides BenchUncontended's metrics it
// reports fifo-violations when the grants carry a queue order. It returns
// the metrics it reported.
func BenchContended(b *testing.B, ms []Mutex) Metrics {
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	var (
		remaining  atomic.Int64
		counter    int   // guarded by the lock under test only
		lastOrder  int64 // likewise
		violations int   // likewise
		holders    atomic.Int32
		overlaps   atomic.Int64
		wg         sync.WaitGroup
		errs       = make(chan error, len(ms))
		waits      = make([][]time.Duration, len(ms))
	)
	remaining.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for i, m := range ms {
		wg.Go(func() {
			for remaining.Add(-1) >= 0 {
				t0 := time.Now()
				release, order, err := m.Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				waits[i] = append(waits[i], time.Since(t0))
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				counter++
				if order != 0 {
					if order < lastOrder {
						violations++
					}
					lastOrder = order
				}
				holders.Add(-1)
				if err := release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if n := overlaps.Load(); n > 0 {
		b.Fatalf("two holders at once, %d times", n)
	}
	if counter != b.N {
		b.Fatalf("counter = %d after %d lock cycles: two goroutines held the lock at once", counter, b.N)
	}
	m := report(b, elapsed, cpu, slices.Concat(waits...))
	if lastOrder != 0 {
		m.report(b, "fifo-violations", float64(violations))
	}
	return m
}

// Metrics are the figures of one benchmark run, by unit as
// testing.B.ReportMetric names them.
type Metrics map[string]float64

func (m Metrics) report(b *testing.B, unit string, v float64) {
	m[unit] = v
	b.ReportMetric(v, unit)
}

func report(b *testing.B, elapsed, cpu time.Duration, waits []time.Duration) Metrics {
	m := Metrics{}
	if len(waits) == 0 {
		return m
	}
	slices.Sort(waits)
	pct := func(p float64) float64 {
		return float64(waits[int(p*float64(len(waits)-1))]) / float64(time.Millisecond)
	}
	m.report(b, "locks/s", float64(len(waits))/elapsed.Seconds())
	m.report(b, "p50-wait-ms", pct(0.50))
	m.report(b, "p99-wait-ms", pct(0.99))
	m.report(b, "cpu-ms/lock", float64(cpu)/float64(time.Millisecond)/float64(len(waits)))
	return m
}
