package redislock_test

// Benchmarks against the peers github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4, all on the same redis-server in one run:
//
//	go test -run '^$' -bench Contended -benchtime 2s -count 3 ./pkg/lock/redislock
//
// Each run reports throughput (locks/s), the wait of each Acquire from its
// call to its grant (p50-wait-ms, p99-wait-ms), the benchmark process's CPU
// (cpu-ms/lock) and allocations (allocs/op) per lock, and the server's side
// (reportServer).

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
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
	"github.com/stocklock/stocklock/pkg/lock/locktest"
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
	benchTTL   = 10 * time.Second
	contenders = 8
	peerRetry  = time.Millisecond // bsm/redislock's README and redsync, for both peers
)

type backendOnly struct {
	b   *redislock.Backend
	key string
}

func (m backendOnly) Acquire(ctx context.Context) (func(context.Context) error, int64, error) {
	const owner = "bench"
	token, err := m.b.TryAcquire(ctx, m.key, owner, benchTTL)
	if err != nil {
		return nil, 0, err
	}
	return func(ctx context.Context) error { return m.b.Release(ctx, m.key, owner, token) }, 0, nil
}

type bsmLock struct {
	c   *bsm.Client
	key string
}

func (m bsmLock) Acquire(ctx context.Context) (func(context.Context) error, int64, error) {
	l, err := m.c.Obtain(ctx, m.key, benchTTL, &bsm.Options{RetryStrategy: bsm.LinearBackoff(peerRetry)})
	if err != nil {
		return nil, 0, err
	}
	return l.Release, 0, nil
}

type redsyncLock struct {
	rs  *redsync.Redsync
	key string
}

func (m redsyncLock) Acquire(ctx context.Context) (func(context.Context) error, int64, error) {
	// A Mutex remembers its value, so each acquisition needs its own.
	mu := m.rs.NewMutex(m.key, redsync.WithExpiry(benchTTL),
		redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(peerRetry))
	if err := mu.LockContext(ctx); err != nil {
		return nil, 0, err
	}
	return func(ctx context.Context) error {
		if ok, err := mu.UnlockContext(ctx); !ok {
			return fmt.Errorf("redsync unlock: %v", err)
		}
		return nil
	}, 0, nil
}

// roundTrips counts the commands (and pipelines) the benchmark clients
// send: each is one round trip.
var roundTrips atomic.Int64

type countHook struct{}

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		roundTrips.Add(1)
		return next(ctx, cmd)
	}
}

func (countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		roundTrips.Add(1)
		return next(ctx, cmds)
	}
}

func benchClient(b *testing.B) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: benchRedis(b).Addr})
	c.AddHook(countHook{})
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
type factory func(b *testing.B, key string) locktest.Mutex

func implementations() []struct {
	name string
	new  factory
} {
	return []struct {
		name string
		new  factory
	}{
		{"stocklock", func(b *testing.B, key string) locktest.Mutex {
			return locktest.LockerMutex{Locker: benchLocker(b, benchClient(b)), Key: key}
		}},
		{"stocklock-backend", func(b *testing.B, key string) locktest.Mutex {
			// The backend alone, one attempt per acquire, no Locker: its
			// own cost, without the Locker's owner, queue place and
			// Lease. Used for the uncontended case only.
			return backendOnly{benchBackend(b, benchClient(b)), key}
		}},
		{"bsm-redislock", func(b *testing.B, key string) locktest.Mutex {
			return bsmLock{bsm.New(benchClient(b)), key}
		}},
		{"redsync", func(b *testing.B, key string) locktest.Mutex {
			return redsyncLock{redsync.New(redsyncgoredis.NewPool(benchClient(b))), key}
		}},
	}
}

// BenchmarkUncontended measures one goroutine taking and releasing a free key.
func BenchmarkUncontended(b *testing.B) {
	for _, impl := range implementations() {
		b.Run(impl.name, func(b *testing.B) {
			m := impl.new(b, "bench:uncontended:"+randHex(4))
			s0 := serverStats(b)
			locktest.BenchUncontended(b, m)
			reportServer(b, s0, serverStats(b))
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
				ms := make([]locktest.Mutex, contenders)
				for i := range ms {
					if shared && i > 0 {
						ms[i] = ms[0]
					} else {
						ms[i] = impl.new(b, key)
					}
				}
				s0 := serverStats(b)
				locktest.BenchContended(b, ms)
				reportServer(b, s0, serverStats(b))
			})
		}
	}
}

// stats is what the server has done so far, as INFO reports it: its CPU
// time (user and system) and the commands it has processed, those a script
// calls included; and the round trips the benchmark's clients have made.
type stats struct {
	cpu        time.Duration
	commands   int64
	roundTrips int64
}

func serverStats(b *testing.B) stats {
	c := redis.NewClient(&redis.Options{Addr: benchRedis(b).Addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "cpu", "stats").Result()
	if err != nil {
		b.Fatalf("INFO: %v", err)
	}
	s := stats{roundTrips: roundTrips.Load()}
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += time.Duration(f * float64(time.Second))
		case "total_commands_processed":
			s.commands, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return s
}

// reportServer reports the server's share of a lock cycle:
// server-cpu-ms/lock; server-cmds/lock, the commands it ran, each command a
// script calls counted (and the measurement's own INFO, noise at these
// b.N); and round-trips/lock, the requests the clients sent (a script is
// one).
func reportServer(b *testing.B, before, after stats) {
	n := float64(b.N)
	b.ReportMetric(float64(after.cpu-before.cpu)/float64(time.Millisecond)/n, "server-cpu-ms/lock")
	b.ReportMetric(float64(after.commands-before.commands)/n, "server-cmds/lock")
	b.ReportMetric(float64(after.roundTrips-before.roundTrips)/n, "round-trips/lock")
}
