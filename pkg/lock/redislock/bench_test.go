package redislock_test

// Benchmarks against the peers github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4, all on the same redis-server in one run:
//
//	go test -run '^$' -bench . -benchtime 3s ./pkg/lock/redislock
//
// Contended runs report throughput (locks/s) and the wait of each Acquire,
// from its call to its grant (p50-wait-ms, p99-wait-ms).

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
)

var bench struct {
	once sync.Once
	srv  *devstore.Redis
	err  error
}

// benchRedis returns the redis-server every benchmark of the run shares, so
// that all contenders are measured against the same server.
func benchRedis(b *testing.B) *devstore.Redis {
	b.Helper()
	bench.once.Do(func() {
		bench.srv, bench.err = devstore.StartRedis(context.Background(), nil)
	})
	if bench.err != nil {
		b.Fatalf("start Redis: %v", bench.err)
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
	peerRetry    = time.Millisecond // bsm/redislock's README and redsync, for both peers
	benchTimeout = 5 * time.Minute
)

// mutex is one contender's view of a lock implementation: acquire blocks
// until held and returns the release.
type mutex interface {
	acquire(ctx context.Context) (release func(context.Context) error, err error)
}

type ours struct {
	l   *lock.Locker
	key string
}

func (m ours) acquire(ctx context.Context) (func(context.Context) error, error) {
	lease, err := m.l.Acquire(ctx, m.key)
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}

type backendOnly struct {
	b   *redislock.Backend
	key string
}

func (m backendOnly) acquire(ctx context.Context) (func(context.Context) error, error) {
	const owner = "bench"
	token, err := m.b.TryAcquire(ctx, m.key, owner, benchTTL)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return m.b.Release(ctx, m.key, owner, token) }, nil
}

type bsmLock struct {
	c   *bsm.Client
	key string
}

func (m bsmLock) acquire(ctx context.Context) (func(context.Context) error, error) {
	l, err := m.c.Obtain(ctx, m.key, benchTTL, &bsm.Options{RetryStrategy: bsm.LinearBackoff(peerRetry)})
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

type redsyncLock struct {
	rs  *redsync.Redsync
	key string
}

func (m redsyncLock) acquire(ctx context.Context) (func(context.Context) error, error) {
	// A Mutex remembers its value, so each acquisition needs its own.
	mu := m.rs.NewMutex(m.key, redsync.WithExpiry(benchTTL),
		redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(peerRetry))
	if err := mu.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		if ok, err := mu.UnlockContext(ctx); !ok {
			return fmt.Errorf("redsync unlock: %v", err)
		}
		return nil
	}, nil
}

func benchClient(b *testing.B) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: benchRedis(b).Addr})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func benchBackend(b *testing.B, c *redis.Client) *redislock.Backend {
	back, err := redislock.New(c, redislock.WithKeyPrefix("stocklock-bench:"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = back.Close()
		deleteKeys(b, benchRedis(b).Addr, "stocklock-bench:*")
	})
	return back
}

func benchLocker(b *testing.B, c *redis.Client) *lock.Locker {
	back := benchBackend(b, c)
	// As NewLocker does.
	l, err := lock.New(back, lock.WithTTL(benchTTL), lock.WithRetry(redislock.DefaultRetry))
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// factory returns a contender's mutex on key, with a client of its own.
type factory func(b *testing.B, key string) mutex

func implementations() []struct {
	name string
	new  factory
} {
	return []struct {
		name string
		new  factory
	}{
		{"stocklock", func(b *testing.B, key string) mutex {
			return ours{benchLocker(b, benchClient(b)), key}
		}},
		{"stocklock-backend", func(b *testing.B, key string) mutex {
			// The backend alone, one attempt per acquire, no Locker: its
			// own cost, without the Lease's watchdog goroutine. Used for
			// the uncontended case only.
			return backendOnly{benchBackend(b, benchClient(b)), key}
		}},
		{"bsm-redislock", func(b *testing.B, key string) mutex {
			return bsmLock{bsm.New(benchClient(b)), key}
		}},
		{"redsync", func(b *testing.B, key string) mutex {
			return redsyncLock{redsync.New(redsyncgoredis.NewPool(benchClient(b))), key}
		}},
	}
}

// BenchmarkUncontended measures one goroutine taking and releasing a free key.
func BenchmarkUncontended(b *testing.B) {
	for _, impl := range implementations() {
		b.Run(impl.name, func(b *testing.B) {
			m := impl.new(b, "bench:uncontended:"+randHex(4))
			ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
			defer cancel()
			n, start := 0, time.Now()
			for b.Loop() {
				n++
				release, err := m.acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/time.Since(start).Seconds(), "locks/s")
		})
	}
}

// BenchmarkContended runs 8 goroutines taking one key in turn, each holding
// it for a read-increment-write of a shared counter. "one-client" is 8
// goroutines of one process sharing a client (and, for stocklock, one
// Backend); "8-clients" gives each goroutine its own, like 8 processes.
func BenchmarkContended(b *testing.B) {
	for _, impl := range implementations() {
		if impl.name == "stocklock-backend" {
			continue // a single attempt does not wait
		}
		for _, shared := range []bool{true, false} {
			name := impl.name + "/8-clients"
			if shared {
				name = impl.name + "/one-client"
			}
			b.Run(name, func(b *testing.B) {
				key := "bench:contended:" + randHex(4)
				ms := make([]mutex, contenders)
				for i := range ms {
					if shared && i > 0 {
						ms[i] = ms[0]
					} else {
						ms[i] = impl.new(b, key)
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
		remaining atomic.Int64
		counter   int // guarded by the lock under test only
		holders   atomic.Int32
		overlaps  atomic.Int64
		wg        sync.WaitGroup
		errs      = make(chan error, len(ms))
		waits     = make([][]time.Duration, len(ms))
	)
	remaining.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for i, m := range ms {
		wg.Go(func() {
			for remaining.Add(-1) >= 0 {
				t0 := time.Now()
				release, err := m.acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				waits[i] = append(waits[i], time.Since(t0))
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				counter++
				holders.Add(-1)
				if err := release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if n := overlaps.Load(); n > 0 {
		b.Fatalf("two holders at once, %d times", n)
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
}
