package etcdlock_test

// Benchmarks of the etcd lock against etcd's own concurrency.Mutex, both on
// one embedded etcd server in one run:
//
//	go test -run '^$' -bench . -benchtime 2000x ./pkg/lock/etcdlock
//
// Contended runs report throughput (locks/s), the wait of each acquisition
// from its call to its grant (p50-wait-ms, p99-wait-ms) and, for
// concurrency.Mutex, a queue lock whose token is the waiter's place in the
// queue, how many grants went out of queue order (fifo-violations).

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/etcdlock"
	"github.com/stocklock/stocklock/pkg/lock/locktest"
)

var benchServer locktest.Server[*devstore.Etcd]

// benchEtcd returns the etcd every benchmark of the run shares.
func benchEtcd(b *testing.B) *devstore.Etcd {
	b.Helper()
	return benchServer.Get(b, func() (*devstore.Etcd, error) {
		return devstore.StartEtcd(context.Background(), nil)
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
)

type stockMutex struct{ m *concurrency.Mutex }

func (m stockMutex) Acquire(ctx context.Context) (func(context.Context) error, int64, error) {
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
type factory func(b *testing.B, key string, c *clientv3.Client) locktest.Mutex

type implementation struct {
	name string
	new  factory
	// shared says one mutex may serve several goroutines: ours may, while
	// a concurrency.Mutex (and its session) serves one at a time.
	shared bool
}

func implementations() []implementation {
	return []implementation{
		{"etcdlock", func(b *testing.B, key string, c *clientv3.Client) locktest.Mutex {
			back, err := etcdlock.New(c, etcdlock.WithKeyPrefix("stocklock-bench/"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = back.Close() })
			l, err := lock.New(back, lock.WithTTL(benchTTL), lock.WithRetry(etcdlock.DefaultRetry))
			if err != nil {
				b.Fatal(err)
			}
			return locktest.LockerMutex{Locker: l, Key: key}
		}, true},
		{"concurrency-mutex", func(b *testing.B, key string, c *clientv3.Client) locktest.Mutex {
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
			locktest.BenchUncontended(b, impl.new(b, "uncontended-"+randHex(4), benchClient(b)))
		})
	}
}

// BenchmarkContended runs 8 goroutines taking one key in turn, each
// holding it for a read-increment-write of a shared counter, BENCH_ROUNDS
// times (default 1) interleaved (locktest.Compare). "8-clients" gives each
// goroutine its own client (and lock), like 8 processes; "one-client" is 8
// goroutines of one process sharing a client and, for ours, one Backend
// (concurrency.Mutex needs a session per goroutine).
func BenchmarkContended(b *testing.B) {
	var cs []locktest.Contender
	for _, impl := range implementations() {
		cs = append(cs, locktest.Contender{Name: impl.name, Mutexes: func(b *testing.B, key string, n int, oneClient bool) []locktest.Mutex {
			return locktest.Contenders(n, oneClient, impl.shared,
				func() *clientv3.Client { return benchClient(b) },
				func(c *clientv3.Client) locktest.Mutex { return impl.new(b, key, c) })
		}})
	}
	locktest.Compare(b, cs, contenders, locktest.Rounds(), nil)
}
