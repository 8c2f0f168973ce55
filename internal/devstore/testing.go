package devstore

import (
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
