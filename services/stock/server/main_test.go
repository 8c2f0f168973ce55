package server_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/services/stock/server"
	"github.com/stocklock/stocklock/services/stock/server/servertest"
)

// One MongoDB and one Redis for the whole package: starting the embedded
// FerretDB costs seconds. Tests keep apart by database name and sku.
var mongoURI, redisAddr, natsURL string

// TestMain runs the tests on the shared servers, then, after a whole run,
// fails it if an error code that openapi.json documents was never answered:
// every code must be produced by at least one test (the contract check of
// contract_test.go notes them). A run that leaves tests out (-run, -skip,
// -short) cannot be expected to see every code and is not judged.
//
// In the quick tier (-short), unless -parallel is given, the tests that
// call t.Parallel run quickParallelism at once.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if testing.Short() && !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(quickParallelism)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	code := devstoretest.Run(m, devstoretest.SharedMongo|devstoretest.SharedRedis|devstoretest.SharedNATS, func(s devstoretest.Shared) {
		mongoURI, redisAddr, natsURL = s.MongoURI, s.RedisAddr, s.NATSURL
	})
	if code == 0 && !partialRun() && !testing.Short() {
		missing, err := codesNotAnswered()
		switch {
		case err != nil:
			fmt.Fprintln(os.Stderr, "FAIL: error codes answered:", err)
			code = 1
		case len(missing) > 0:
			fmt.Fprintln(os.Stderr, "FAIL: no test was answered with these error codes of openapi.json:", missing)
			code = 1
		}
	}
	os.Exit(code)
}

// quickParallelism is how many of the tests that call t.Parallel (those
// that answer 503s and 500s by stalling a write, waiting out a lock wait or
// a request timeout, or stopping a store) run at once in the quick tier.
// They compute little and wait most of their time; at go test's default,
// one per core, they ran two at a time after every other test, the
// package's longest stretch. There are eight of them.
const quickParallelism = 8

// testAdminToken is every test replica's admin token.
const testAdminToken = "test-admin-token-0123456789"

// testConfig returns a valid configuration on the shared servers, in a
// database of its own.
func testConfig(t testing.TB, replica string) server.Config {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	cfg := server.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.MongoURI = mongoURI
	cfg.RedisAddr = redisAddr
	cfg.DB = "stock_test_" + hex.EncodeToString(b[:])
	cfg.Replica = replica
	cfg.LockTTL = 5 * time.Second
	cfg.AdminToken = testAdminToken
	cfg.LogFormat = "text"
	cfg.LogLevel = "warn"
	withContract(t, &cfg)
	return cfg
}

// withNATS is cfg with the shared NATS, for a replica that serves the
// queued strategy. The others go without: a replica with NATS runs the
// queued consumers in the background from its start. The stream of
// cfg.DB is deleted when the test ends: a NATS server of the machine
// (NATS_URL) outlives the test.
func withNATS(t testing.TB, cfg server.Config) server.Config {
	t.Helper()
	return servertest.WithNATS(t, cfg, natsURL)
}

// newServer starts a replica that is shut down when the test ends.
func newServer(t testing.TB, cfg server.Config) *server.Server {
	t.Helper()
	logger := server.NewLogger(t.Output(), cfg)
	s, err := server.New(t.Context(), cfg, logger)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}
