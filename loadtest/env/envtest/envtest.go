// Package envtest runs replicas of the stock service inside a test
// process, for the tests of the harness and the live page that need real
// replicas but no process control.
package envtest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
	"github.com/stocklock/stocklock/services/stock/server"
	"github.com/stocklock/stocklock/services/stock/server/servertest"
)

// Replicas runs two replicas (a and b) of the stock service in the test
// process, on free loopback ports, against one MongoDB, one Redis and one
// etcd, and returns their base URLs. They are shut down in t.Cleanup.
// Without WithNATS they have no NATS server: queued answers 503.
func Replicas(t testing.TB, adminToken string, rmwDelay time.Duration, opts ...Option) []string {
	t.Helper()
	mongo := devstoretest.Mongo(t)
	redis := devstoretest.Redis(t)
	etcd := devstoretest.Etcd(t) // before the replicas: closed after them
	t.Logf("MongoDB: %s, Redis: %s, etcd: %s", mongo.Kind, redis.Kind, etcd.Kind)

	// A database of its own, in case MONGO_URI is a shared server.
	db := fmt.Sprintf("loadtest_%08x", rand.Uint32())
	var extra []string
	for _, o := range opts {
		extra = append(extra, o(t, db)...)
	}

	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	var bases []string
	for _, id := range []string{"a", "b"} {
		cfg, err := server.ParseConfig(append([]string{
			"--addr", "127.0.0.1:0", "--mongo-uri", mongo.URI, "--redis-addr", redis.Addr,
			"--db", db, "--replica", id, "--rmw-delay", rmwDelay.String(), "--demo", "--admin-token", adminToken,
			"--etcd-endpoints", strings.Join(etcd.Endpoints, ","),
		}, extra...), func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, servertest.Start(t, t.Context(), cfg, logger.With("replica", id)))
	}
	return bases
}

// An Option adds flags to the replicas of database db.
type Option func(t testing.TB, db string) []string

// WithNATS gives the replicas a NATS server with JetStream
// (devstoretest.NATS), for the queued strategy; the stream of their
// database is deleted when the test ends.
func WithNATS() Option {
	return func(t testing.TB, db string) []string {
		n := devstoretest.NATS(t) // before the replicas: closed after them
		t.Cleanup(func() {
			nc, err := nats.Connect(n.URL)
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			if err := mongostore.DeleteQueuedStream(context.Background(), nc, db, mongostore.QueuedOptions{}); err != nil {
				t.Error(err)
			}
		})
		return []string{"--nats-url", n.URL}
	}
}
