// Package servertest runs replicas of the stock service inside a test
// process, for the tests of the packages that talk to one (the client,
// the harness, the deployment checks). It is imported by tests only.
package servertest

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
	"github.com/stocklock/stocklock/services/stock/server"
)

// Start builds a replica of cfg (server.New with ctx and logger, nil for
// slog.Default) and serves it on a free loopback port until the test ends,
// then shuts it down, failing the test if the shutdown or the serving
// failed. It returns the replica's base URL.
func Start(t testing.TB, ctx context.Context, cfg server.Config, logger *slog.Logger) string {
	t.Helper()
	srv, err := server.New(ctx, cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = srv.Shutdown(context.Background())
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("replica %s: shutdown: %v", cfg.Replica, err)
		}
		if err := <-served; err != nil {
			t.Errorf("replica %s: %v", cfg.Replica, err)
		}
	})
	return "http://" + ln.Addr().String()
}

// WithNATS is cfg with the NATS server at url, for a replica that serves
// the queued strategy. The stream of cfg.DB is deleted when the test
// ends (after the replicas started later have stopped): a NATS server of
// the machine (NATS_URL) outlives the test.
func WithNATS(t testing.TB, cfg server.Config, url string) server.Config {
	t.Helper()
	cfg.NATSURL = url
	t.Cleanup(func() {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		if err := mongostore.DeleteQueuedStream(context.Background(), nc, cfg.DB, mongostore.QueuedOptions{}); err != nil {
			t.Error(err)
		}
	})
	return cfg
}
