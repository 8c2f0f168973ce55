package redislock_test

// Benchmarks against the peers github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4, all on the same redis-server in one run:
//
//	go test -run '^$' -bench Contended -benchtime 2s ./pkg/lock/redislock
//	scripts/bench-redislock.sh    # pinned to separate cores, 5 rounds, with the floor
//
// Each run reports throughput (locks/s), the wait of each Acquire from its
// call to its grant (p50-wait-ms, p99-wait-ms), the benchmark process's CPU
// (cpu-ms/lock) and allocations (allocs/op) per lock, and the server's side
// (serverProbe): its CPU, the commands it ran and the round trips.

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
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

var benchServer locktest.Server[*devstore.Redis]

// benchRedis returns the redis-server every benchmark of the run shares, so
// that all contenders are measured against the same server: the one at
// REDIS_ADDR if that is set (scripts/bench-redislock.sh starts one pinned
// to its own core), else one started for the run.
func benchRedis(b *testing.B) *devstore.Redis {
	b.Helper()
	return benchServer.Get(b, func() (*devstore.Redis, error) {
		return devstore.StartRedis(context.Background(), nil)
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	benchServer.Close()
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

// mutexFor returns a contender's mutex on key, over client c.
type mutexFor func(b *testing.B, c *redis.Client, key string) locktest.Mutex

var (
	stocklockMutex mutexFor = func(b *testing.B, c *redis.Client, key string) locktest.Mutex {
		return locktest.LockerMutex{Locker: benchLocker(b, c), Key: key}
	}
	// The backend alone, one attempt per acquire, no Locker: its own
	// cost, without the Locker's owner, queue place and Lease. Used for
	// the uncontended case only.
	backendMutex mutexFor = func(b *testing.B, c *redis.Client, key string) locktest.Mutex {
		return backendOnly{benchBackend(b, c), key}
	}
	bsmMutex mutexFor = func(b *testing.B, c *redis.Client, key string) locktest.Mutex {
		return bsmLock{bsm.New(c), key}
	}
	redsyncMutex mutexFor = func(b *testing.B, c *redis.Client, key string) locktest.Mutex {
		return redsyncLock{redsync.New(redsyncgoredis.NewPool(c)), key}
	}
)

// BenchmarkUncontended measures one goroutine taking and releasing a free key.
func BenchmarkUncontended(b *testing.B) {
	for _, impl := range []struct {
		name string
		new  mutexFor
	}{
		{"stocklock", stocklockMutex},
		{"stocklock-backend", backendMutex},
		{"bsm-redislock", bsmMutex},
		{"redsync", redsyncMutex},
	} {
		b.Run(impl.name, func(b *testing.B) {
			m := impl.new(b, benchClient(b), "bench:uncontended:"+randHex(4))
			after := serverProbe(b)
			locktest.BenchUncontended(b, m).Add(b, after())
		})
	}
}

// BenchmarkContended runs 8 goroutines taking one key in turn, each holding
// it for a read-increment-write of a shared counter, for stocklock and its
// two peers, BENCH_ROUNDS times (default 1) interleaved (locktest.Compare),
// with the floor cases of BenchmarkFloor in the same rounds.
// "one-client" is 8 goroutines of one process sharing a client (and, for
// stocklock, one Backend and Locker); "8-clients" gives each goroutine its
// own, like 8 processes.
func BenchmarkContended(b *testing.B) {
	contender := func(name string, new mutexFor) locktest.Contender {
		return locktest.Contender{Name: name, Mutexes: func(b *testing.B, key string, n int, oneClient bool) []locktest.Mutex {
			return locktest.Contenders(n, oneClient, true,
				func() *redis.Client { return benchClient(b) },
				func(c *redis.Client) locktest.Mutex { return new(b, c, key) })
		}}
	}
	locktest.Compare(b, []locktest.Contender{
		contender("stocklock", stocklockMutex),
		contender("bsm-redislock", bsmMutex),
		contender("redsync", redsyncMutex),
	}, contenders, locktest.Rounds(), serverProbe, floorCases()...)
}

// stats is what the server has done so far, as INFO reports it: its CPU
// time (user and system) and the calls of each command (commandCalls);
// and the round trips the benchmark's clients have made.
type stats struct {
	cpu        time.Duration
	calls      map[string]int64
	roundTrips int64
}

func serverStats(b *testing.B) stats {
	c := redis.NewClient(&redis.Options{Addr: benchRedis(b).Addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatalf("INFO: %v", err)
	}
	s := stats{calls: commandCalls(b, c), roundTrips: roundTrips.Load()}
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += time.Duration(f * float64(time.Second))
		}
	}
	return s
}

// serverProbe measures the server's share of a lock cycle:
// server-cpu-ms/lock; server-calls/lock, the commands the server ran for
// the locks, each call a script makes counted and the scripts themselves
// not (see notACall), and how many of each command
// ("calls=get/lock"...); and round-trips/lock, the requests the clients
// sent (a script is one).
func serverProbe(b *testing.B) func() locktest.Metrics {
	before := serverStats(b)
	return func() locktest.Metrics {
		after := serverStats(b)
		n := float64(b.N)
		m := locktest.Metrics{
			"server-cpu-ms/lock": float64(after.cpu-before.cpu) / float64(time.Millisecond) / n,
			"round-trips/lock":   float64(after.roundTrips-before.roundTrips) / n,
		}
		for name, calls := range after.calls {
			d := calls - before.calls[name]
			switch {
			case name == "":
				m["server-calls/lock"] = float64(d) / n
			case d != 0 && !slices.Contains(notACall, name):
				m["calls="+name+"/lock"] = float64(d) / n
			}
		}
		return m
	}
}

// The server's side of a lock cycle and nothing else (BenchmarkFloor):
// each script makes the calls of one of the cycle's round trips, on keys
// of the client's own, so nothing ever waits.
var (
	floorEmpty = redis.NewScript(`return 1`)
	// stocklock: a waiter joins the queue (wait.lua, queue first) ...
	floorQueue = redis.NewScript(`return redis.call('RPUSH', KEYS[1], ARGV[1])`)
	// ... and the release hands the key to it (lib.lua's pass_on).
	floorHand = redis.NewScript(`
local e = redis.call('LPOP', KEYS[1]) or 'w'
local t = redis.call('TIME')
redis.call('SET', KEYS[2], t[1] .. t[2] .. ':' .. e, 'GET')
redis.call('SET', KEYS[3], t[1] .. t[2], 'PX', 10000)
if ARGV[1] ~= '' then redis.call('PUBLISH', ARGV[1], e) end
return 2`)
	// bsm/redislock's release: GET, compare, DEL.
	floorBSMRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

// BenchmarkFloor measures the least a lock cycle costs on this machine,
// with nothing to wait for: each client sends, back to back, the round
// trips of a cycle with the server calls it makes, on keys of its own.
// With redis-server on a core of its own (scripts/bench-redislock.sh):
//
//	8-clients/...: 8 clients at once, all of a cycle's round trips:
//	cycles/s is what the server and the benchmark's core can do at most,
//	server-cpu-ms/lock what the calls cost the server when it is busy.
//	critical-path/...: one client, the round trips a contended cycle must
//	wait for one after the other: stocklock's release, whose reply (or
//	message) is the next holder's grant; bsm/redislock's grant and
//	release (its next grant cannot start before the release). cycles/s is
//	the most a contended lock could do were nothing else in the way.
//
// The cycles: stocklock: wait.lua's RPUSH (queue first), then the
// release's LPOP, TIME, SET ... GET, SET (and PUBLISH across processes):
// 2 round trips, 5 or 6 calls. bsm-redislock: SET NX PX, then its release
// script's GET and DEL: 2 round trips, 3 calls, without the failed
// attempts of a contended cycle. empty-scripts: two scripts that call
// nothing.
func BenchmarkFloor(b *testing.B) {
	locktest.RunRounds(b, "Floor", floorCases(), locktest.Rounds())
}

// floorCases are BenchmarkFloor's cases.
func floorCases() []locktest.Case {
	ctx := context.Background()
	queue := func(c *redis.Client, k string) error {
		return floorQueue.Run(ctx, c, []string{k + ":q"}, "w").Err()
	}
	hand := func(channel string) func(c *redis.Client, k string) error {
		return func(c *redis.Client, k string) error {
			return floorHand.Run(ctx, c, []string{k + ":q", k + ":f", k}, channel).Err()
		}
	}
	bsmCycle := func(c *redis.Client, k string) error {
		if err := c.SetNX(ctx, k, "v", benchTTL).Err(); err != nil {
			return err
		}
		return floorBSMRelease.Run(ctx, c, []string{k}, "v").Err()
	}
	both := func(fs ...func(c *redis.Client, k string) error) func(c *redis.Client, k string) error {
		return func(c *redis.Client, k string) error {
			for _, f := range fs {
				if err := f(c, k); err != nil {
					return err
				}
			}
			return nil
		}
	}
	empty := func(c *redis.Client, _ string) error { return floorEmpty.Run(ctx, c, nil).Err() }
	var cases []locktest.Case
	for _, tc := range []struct {
		name    string
		clients int
		cycle   func(c *redis.Client, k string) error
	}{
		{"8-clients/stocklock", contenders, both(queue, hand(""))},
		{"8-clients/stocklock-publish", contenders, both(queue, hand("stocklock-bench:floor:nobody"))},
		{"8-clients/bsm-redislock", contenders, bsmCycle},
		{"8-clients/empty-scripts", contenders, both(empty, empty)},
		// Only the release is on stocklock's critical path: the releaser
		// queues again while the next holder works.
		{"critical-path/stocklock", 1, hand("")},
		{"critical-path/bsm-redislock", 1, bsmCycle},
		{"critical-path/one-empty-script", 1, empty},
	} {
		cases = append(cases, locktest.Case{Name: "floor/" + tc.name, Run: func(b *testing.B) locktest.Metrics {
			clients := make([]*redis.Client, tc.clients)
			for i := range clients {
				clients[i] = benchClient(b)
				if err := tc.cycle(clients[i], "stocklock-bench:floor:warm"); err != nil {
					b.Fatal(err)
				}
			}
			b.Cleanup(func() { deleteKeys(b, benchRedis(b).Addr, "stocklock-bench:floor:*") })
			var remaining atomic.Int64
			remaining.Store(int64(b.N))
			after := serverProbe(b)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i, c := range clients {
				k := "stocklock-bench:floor:" + strconv.Itoa(i)
				wg.Go(func() {
					for remaining.Add(-1) >= 0 {
						if err := tc.cycle(c, k); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			m := locktest.Metrics{"cycles/s": float64(b.N) / time.Since(start).Seconds()}
			b.ReportMetric(m["cycles/s"], "cycles/s")
			m.Add(b, after())
			return m
		}})
	}
	return cases
}
