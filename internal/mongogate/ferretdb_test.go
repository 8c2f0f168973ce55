package mongogate

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ferretMu serializes ferretdb.New, which writes a package-level variable of
// FerretDB (version.Get().Package) and would trip the race detector.
var ferretMu sync.Mutex

// startFerretDB runs an embedded FerretDB (SQLite in a temp dir) for one test
// and returns its host:port. This package cannot use internal/devstore, which
// builds on it, so it starts FerretDB itself.
func startFerretDB(t *testing.T) string {
	t.Helper()

	ferretMu.Lock()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Handler:   "sqlite",
		SQLiteURL: "file:" + t.TempDir() + "/",
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	ferretMu.Unlock()
	if err != nil {
		t.Fatalf("ferretdb.New: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	u, err := url.Parse(f.MongoDBURI())
	if err != nil {
		t.Fatalf("parse FerretDB URI: %v", err)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err == nil {
			_ = c.Close()
			return u.Host
		}
		if time.Now().After(deadline) {
			t.Fatalf("FerretDB at %s does not answer: %v", u.Host, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startGate runs a gate in front of upstream for one test.
func startGate(t *testing.T, upstream string) *Gate {
	t.Helper()

	g, err := Start(upstream, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
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
