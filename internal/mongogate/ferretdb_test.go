package mongogate

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/storeproc"
)

// startFerretDB runs FerretDB (SQLite in a temp dir) in a devstored
// process for one test and returns its host:port. This package cannot use
// internal/devstore, which builds on it, so it starts devstored itself.
func startFerretDB(t *testing.T) string {
	t.Helper()

	p, err := storeproc.Start(t.Context(), slog.New(slog.NewTextHandler(os.Stderr, nil)), "ferretdb", "-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	addrs, err := p.Ready(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// startGate runs a gate in front of upstream for one test.
func startGate(t *testing.T, upstream string) *Gate {
	t.Helper()
	return startGateWith(t, upstream, Options{})
}

// startGateWith runs a gate with opts in front of upstream for one test.
func startGateWith(t *testing.T, upstream string, opts Options) *Gate {
	t.Helper()

	g, err := Start(upstream, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return g
}

// connect returns a client for addr that is disconnected at the end of the test.
func connect(t *testing.T, addr string, opts ...*options.ClientOptions) *mongo.Client {
	t.Helper()

	all := append([]*options.ClientOptions{options.Client().ApplyURI("mongodb://" + addr + "/")}, opts...)
	c, err := mongo.Connect(all...)
	if err != nil {
		t.Fatalf("mongo.Connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}
