package etcdlock_test

// Benchmarks of the two etcd locks against etcd's own concurrency.Mutex,
// all on one embedded etcd server in one run:
//
//	go test -run '^$' -bench . -benchtime 2000x ./pkg/lock/etcdlock
//
// Contended runs report throughput (locks/s), the wait of each acquisition
// from its call to its grant (p50-wait-ms, p99-wait-ms) and, for the two
// queue locks, whose token is the waiter's place in the queue, how many
// grants went out of queue order (fifo-violations).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/etcdlock"
)

var bench struct {
	once sync.Once
	srv  *devstore.Etcd
	err  error
}

// benchEtcd returns the etcd every benchmark of the run shares.
func benchEtcd(b *testing.B) *devstore.Etcd {
	b.Helper()
	bench.once.Do(func() {
		bench.srv, bench.err = devstore.StartEtcd(context.Background(), nil)
	})
	if bench.err != nil {
		b.Fatalf("start etcd: %v", bench.err)
	}
	return bench.srv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bench.srv != nil {
		_ = bench.srv.Close()
	}
	os.Exit(code)
}

const (
	benchTTL     = 10 * time.Second
	contenders   = 8
	benchTimeout = 5 * time.Minute
)

// mutex is one contender's view of a lock: acquire blocks until held and
// returns the release and, for a queue lock, the create revision of the
// waiter's key (0 otherwise).
type mutex interface {
	acquire(ctx context.Context) (release func(context.Context) error, queueRev int64, err error)
}

type lockerMutex struct {
	l   *lock.Locker
	key string
}

func (m lockerMutex) acquire(ctx context.Context) (func(context.Context) error, int64, error) {
	lease, err := m.l.Acquire(ctx, m.key)
	if err != nil {
		return nil, 0, err
	}
	return lease.Release, 0, nil
}

type fifoMutex struct {
	f   *etcdlock.FIFO
	key string
}

func (m fifoMutex) acquire(ctx context.Context) (func(context.Context) error, int64, error) {
	h, err := m.f.Acquire(ctx, m.key)
	if err != nil {
		return nil, 0, err
	}
	return h.Release, int64(h.Token()), nil
}

type stockMutex struct{ m *concurrency.Mutex }

func (m stockMutex) acquire(ctx context.Context) (func(context.Context) error, int64, error) {
	if err := m.m.Lock(ctx); err != nil {
		return nil, 0, err
	}
	own := m.m.IsOwner()
	return m.m.Unlock, own.GetCompare().GetCreateRevision(), nil
}

func benchClient(b *testing.B) *clientv3.Client {
	c, err := benchEtcd(b).Client()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// factory returns a contender's mutex on key over client c.
type factory func(b *testing.B, key string, c *clientv3.Client) mutex

type implementation struct {
	name string
	new  factory
	// shared says one mutex may serve several goroutines: ours may, while
	// a concurrency.Mutex (and its session) serves one at a time.
	shared bool
}

func implementations() []implementation {
	return []implementation{
		{"etcdlock", func(b *testing.B, key string, c *clientv3.Client) mutex {
			back, err := etcdlock.New(c, etcdlock.WithKeyPrefix("stocklock-bench/"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = back.Close() })
			l, err := lock.New(back, lock.WithTTL(benchTTL), lock.WithRetry(etcdlock.DefaultRetry))
			if err != nil {
				b.Fatal(err)
			}
			return lockerMutex{l, key}
		}, true},
		{"etcdlock-fifo", func(b *testing.B, key string, c *clientv3.Client) mutex {
			f, err := etcdlock.NewFIFO(c, etcdlock.WithKeyPrefix("stocklock-bench/"), etcdlock.WithTTL(benchTTL))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = f.Close() })
			return fifoMutex{f, key}
		}, true},
		{"concurrency-mutex", func(b *testing.B, key string, c *clientv3.Client) mutex {
			s, err := concurrency.NewSession(c, concurrency.WithTTL(int(benchTTL/time.Second)))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return stockMutex{concurrency.NewMutex(s, "stocklock-bench/mutex/"+key)}
		}, false},
	}
}

// BenchmarkUncontended measures one goroutine taking and releasing a free key.
func BenchmarkUncontended(b *testing.B) {
	for _, impl := range implementations() {
		b.Run(impl.name, func(b *testing.B) {
			m := impl.new(b, "uncontended-"+randHex(4), benchClient(b))
			ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
			defer cancel()
			n, start, cpu0 := 0, time.Now(), cpuTime()
			for b.Loop() {
				n++
				release, _, err := m.acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "locks/s")
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(n), "cpu-ms/lock")
		})
	}
}

// BenchmarkContended runs 8 goroutines taking one key in turn, each
// holding it for a read-increment-write of a shared counter. "8-clients"
// gives each goroutine its own client (and lock), like 8 processes;
// "one-client" is 8 goroutines of one process sharing a client and, for
// our locks, one Backend or FIFO (concurrency.Mutex needs a session per
// goroutine).
func BenchmarkContended(b *testing.B) {
	for _, impl := range implementations() {
		for _, oneClient := range []bool{false, true} {
			name := impl.name + "/8-clients"
			if oneClient {
				name = impl.name + "/one-client"
			}
			b.Run(name, func(b *testing.B) {
				key := "contended-" + randHex(4)
				ms := make([]mutex, contenders)
				var c *clientv3.Client
				for i := range ms {
					switch {
					case !oneClient:
						ms[i] = impl.new(b, key, benchClient(b))
					case i == 0:
						c = benchClient(b)
						ms[i] = impl.new(b, key, c)
					case impl.shared:
						ms[i] = ms[0]
					default:
						ms[i] = impl.new(b, key, c)
					}
				}
				runContended(b, ms)
			})
		}
	}
}

func runContended(b *testing.B, ms []mutex) {
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	var (
		remaining  atomic.Int64
		counter    int   // guarded by the lock under test only
		lastRev    int64 // likewise
		violations int   // likewise
		holders    atomic.Int32
		wg         sync.WaitGroup
		errs       = make(chan error, len(ms))
		waits      = make([][]time.Duration, len(ms))
	)
	remaining.Store(int64(b.N))
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for i, m := range ms {
		wg.Go(func() {
			for remaining.Add(-1) >= 0 {
				t0 := time.Now()
				release, rev, err := m.acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				waits[i] = append(waits[i], time.Since(t0))
				if holders.Add(1) != 1 {
					errs <- errors.New("two holders at once")
				}
				counter++
				if rev != 0 {
					if rev < lastRev {
						violations++
					}
					lastRev = rev
				}
				holders.Add(-1)
				if err := release(ctx); err != nil {
					errs <- fmt.Errorf("release: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if counter != b.N {
		b.Fatalf("counter = %d, want %d", counter, b.N)
	}
	all := slices.Concat(waits...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "locks/s")
	b.ReportMetric(pct(0.50), "p50-wait-ms")
	b.ReportMetric(pct(0.99), "p99-wait-ms")
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/lock")
	if lastRev != 0 {
		b.ReportMetric(float64(violations), "fifo-violations")
	}
}

// cpuTime returns the CPU time (user and system) this process has used so
// far: the embedded server's and the clients'. On a shared machine it
// says more about a lock's cost than the wall clock does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
