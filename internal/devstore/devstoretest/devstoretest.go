// Package devstoretest gives tests the servers of internal/devstore: each
// started for one test and closed in its t.Cleanup, or started once for a
// package's tests in TestMain (Main). It is the only place that ties
// devstore to package testing, so the binaries that use devstore (the stock
// service's, the load harness's, devstored) do not link testing.
//
// A server that needs a tool this machine lacks (redis-server, redis-cli,
// gcc) skips the test through internal/testskip, which scripts/test.sh
// lists at the end of the run.
package devstoretest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/testskip"
)

// Logger writes to the test's own output, so a server's complaints show up
// next to the test that caused them. Everything started here is stopped in
// t.Cleanup, before the test is over, so nothing logs to a finished test.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// closeAtCleanup closes c when the test ends, failing it if that fails.
func closeAtCleanup(t testing.TB, what string, c interface{ Close() error }) {
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close %s: %v", what, err)
		}
	})
}

// started starts a server for one test with start, fails the test if it
// cannot, and closes the server in t.Cleanup.
func started[S interface{ Close() error }](t testing.TB, what string, start func(context.Context, *slog.Logger) (S, error)) S {
	t.Helper()
	s, err := start(t.Context(), Logger(t))
	if err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	closeAtCleanup(t, what, s)
	return s
}

// Redis returns a Redis for one test: the one at REDIS_ADDR, shared with
// other tests, or a private one that is closed in t.Cleanup. It fails the
// test if none can be started.
func Redis(t testing.TB) *devstore.Redis {
	t.Helper()
	return started(t, "Redis", devstore.StartRedis)
}

// NATS starts a NATS server with JetStream (see devstore.StartNATS),
// closed at cleanup.
func NATS(t testing.TB) *devstore.NATS {
	t.Helper()
	return started(t, "NATS", devstore.StartNATS)
}

// Mongo returns a MongoDB for one test: the one at MONGO_URI, shared with
// other tests, or a private one that is closed in t.Cleanup. It fails the
// test if none can be started.
func Mongo(t testing.TB) *devstore.Mongo {
	t.Helper()
	return started(t, "MongoDB", devstore.StartMongo)
}

// Etcd returns an etcd for one test: the one at ETCD_ENDPOINTS, shared with
// other tests, or a private embedded server that is closed in t.Cleanup. It
// fails the test if none can be started.
func Etcd(t testing.TB) *devstore.Etcd {
	t.Helper()
	return started(t, "etcd", devstore.StartEtcd)
}

// EtcdClient returns a client of e that is closed in t.Cleanup.
func EtcdClient(t testing.TB, e *devstore.Etcd) *clientv3.Client {
	t.Helper()
	c, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// RedisCluster returns a Redis Cluster for one test: the one at
// REDIS_CLUSTER_ADDRS, shared with other tests, or a private one of six
// redis-server processes that is closed in t.Cleanup. It skips the test when
// neither is available (no redis-server or redis-cli on PATH), or, for a
// private one, in the quick tier (-short), and fails it if the cluster does
// not start.
func RedisCluster(t testing.TB) *devstore.RedisCluster {
	t.Helper()
	if os.Getenv("REDIS_CLUSTER_ADDRS") == "" {
		testskip.Long(t, "starts a six-node Redis Cluster")
	}
	c, err := devstore.StartRedisCluster(t.Context(), Logger(t))
	if errors.Is(err, devstore.ErrNoRedisServer) {
		testskip.Missing(t, testskip.RedisServer, "no redis-server and redis-cli on PATH for a Redis Cluster, and REDIS_CLUSTER_ADDRS unset")
	}
	if err != nil {
		t.Fatalf("start Redis Cluster: %v", err)
	}
	closeAtCleanup(t, "Redis Cluster", c)
	return c
}

// RedisClock returns a private redis-server whose clock the test can move
// (devstore.StartRedisClock), closed in t.Cleanup. It skips the test when
// redis-server or gcc (to build the clock shim) is missing, and fails it if
// the server does not start.
func RedisClock(t testing.TB) *devstore.Redis {
	t.Helper()
	r, err := devstore.StartRedisClock(t.Context(), Logger(t))
	switch {
	case errors.Is(err, devstore.ErrNoRedisServer):
		testskip.Missing(t, testskip.RedisServer, "no redis-server on PATH: the clock shim needs a real redis-server")
	case errors.Is(err, devstore.ErrNoClockShim):
		SkipNoClock(t, err)
	case err != nil:
		t.Fatalf("start redis-server with the clock shim: %v", err)
	}
	closeAtCleanup(t, "Redis", r)
	return r
}

// SkipNoClock skips a test that needs to move a server's clock, given
// devstore's reason why it cannot (an error wrapping devstore.ErrNoClockShim).
func SkipNoClock(t testing.TB, reason error) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		testskip.Missing(t, testskip.GCC, "the clock shim is built with gcc")
	}
	t.Skipf("the clock shim did not build: %v", reason)
}

// RedisServers returns n independent redis-servers
// (devstore.StartRedisServers), closed in t.Cleanup. It skips the test when
// redis-server is not on PATH, and fails it if they do not start. Whether
// their clocks can be moved is in NoClock.
func RedisServers(t testing.TB, n int) *devstore.RedisServers {
	t.Helper()
	s, err := devstore.StartRedisServers(t.Context(), Logger(t), n)
	if errors.Is(err, devstore.ErrNoRedisServer) {
		testskip.Missing(t, testskip.RedisServer, "no redis-server on PATH: independent redis-servers cannot be started")
	}
	if err != nil {
		t.Fatalf("start %d redis-servers: %v", n, err)
	}
	closeAtCleanup(t, "redis-servers", s)
	return s
}

// Stores says which servers Main starts for a package's tests.
type Stores uint8

const (
	SharedMongo Stores = 1 << iota
	SharedRedis
	SharedNATS
)

// Shared are the servers Main started; a field is empty unless asked for.
type Shared struct {
	MongoURI  string
	RedisAddr string
	NATSURL   string
}

// Main is a TestMain for a package whose tests share one MongoDB and, with
// SharedRedis, one Redis (each test keeps apart by database name or key):
// starting the embedded FerretDB costs seconds. It starts them, hands their
// addresses to use, runs the tests, closes the servers and exits with the
// tests' status.
func Main(m *testing.M, stores Stores, use func(Shared)) {
	os.Exit(Run(m, stores, use))
}

// Run is Main without the exit: it returns the tests' status, for a
// TestMain that judges something after them.
func Run(m *testing.M, stores Stores, use func(Shared)) int {
	// Ten minutes: on a cold build cache the first store to start waits
	// for devstored to build.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var sh Shared
	if stores&SharedMongo != 0 {
		mg, err := devstore.StartMongo(ctx, logger)
		if err != nil {
			fmt.Fprintln(os.Stderr, "start MongoDB:", err)
			return 1
		}
		defer mg.Close()
		sh.MongoURI = mg.URI
	}
	if stores&SharedRedis != 0 {
		rd, err := devstore.StartRedis(ctx, logger)
		if err != nil {
			fmt.Fprintln(os.Stderr, "start Redis:", err)
			return 1
		}
		defer rd.Close()
		sh.RedisAddr = rd.Addr
	}
	if stores&SharedNATS != 0 {
		n, err := devstore.StartNATS(ctx, logger)
		if err != nil {
			fmt.Fprintln(os.Stderr, "start NATS:", err)
			return 1
		}
		defer n.Close()
		sh.NATSURL = n.URL
	}
	use(sh)
	return m.Run()
}
