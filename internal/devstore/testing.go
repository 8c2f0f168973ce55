package devstore

import (
	"errors"
	"log/slog"
	"testing"
)

// RedisT returns a Redis for one test: the one at REDIS_ADDR, shared with
// other tests, or a private one that is closed in t.Cleanup. It fails the
// test if none can be started.
func RedisT(t testing.TB) *Redis {
	t.Helper()

	r, err := StartRedis(t.Context(), testLogger(t))
	if err != nil {
		t.Fatalf("start Redis: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close Redis: %v", err)
		}
	})
	return r
}

// MongoT returns a MongoDB for one test: the one at MONGO_URI, shared with
// other tests, or a private one that is closed in t.Cleanup. It fails the
// test if none can be started.
func MongoT(t testing.TB) *Mongo {
	t.Helper()

	m, err := StartMongo(t.Context(), testLogger(t))
	if err != nil {
		t.Fatalf("start MongoDB: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close MongoDB: %v", err)
		}
	})
	return m
}

// testLogger writes to the test's own output, so a server's complaints show
// up next to the test that caused them. Everything started here is stopped in
// t.Cleanup, before the test is over, so nothing logs to a finished test.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// RedisClusterT returns a Redis Cluster for one test: the one at
// REDIS_CLUSTER_ADDRS, shared with other tests, or a private one of six
// redis-server processes that is closed in t.Cleanup. It skips the test when
// neither is available (no redis-server or redis-cli on PATH), and fails it
// if the cluster does not start.
func RedisClusterT(t testing.TB) *RedisCluster {
	t.Helper()

	c, err := StartRedisCluster(t.Context(), testLogger(t))
	if errors.Is(err, ErrNoRedisServer) {
		t.Skip("no Redis Cluster: set REDIS_CLUSTER_ADDRS or put redis-server and redis-cli on PATH")
	}
	if err != nil {
		t.Fatalf("start Redis Cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close Redis Cluster: %v", err)
		}
	})
	return c
}

// RedisClockT returns a private redis-server whose clock the test can move
// (StartRedisClock), closed in t.Cleanup. It skips the test when
// redis-server or gcc (to build the clock shim) is missing, and fails it if
// the server does not start.
func RedisClockT(t testing.TB) *Redis {
	t.Helper()

	r, err := StartRedisClock(t.Context(), testLogger(t))
	switch {
	case errors.Is(err, ErrNoRedisServer):
		t.Skip("no redis-server on PATH: the clock shim needs a real redis-server")
	case errors.Is(err, ErrNoClockShim):
		t.Skipf("no clock shim: %v", err)
	case err != nil:
		t.Fatalf("start redis-server with the clock shim: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close Redis: %v", err)
		}
	})
	return r
}

// RedisServersT returns n independent redis-servers (StartRedisServers),
// closed in t.Cleanup. It skips the test when redis-server is not on PATH,
// and fails it if they do not start. Whether their clocks can be moved is
// in NoClock.
func RedisServersT(t testing.TB, n int) *RedisServers {
	t.Helper()

	s, err := StartRedisServers(t.Context(), testLogger(t), n)
	if errors.Is(err, ErrNoRedisServer) {
		t.Skip("no redis-server on PATH: independent redis-servers cannot be started")
	}
	if err != nil {
		t.Fatalf("start %d redis-servers: %v", n, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close redis-servers: %v", err)
		}
	})
	return s
}
