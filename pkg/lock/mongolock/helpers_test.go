package mongolock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/pkg/lock/mongolock"
)

// dbName returns a database name of its own for the test (FerretDB accepts
// [a-zA-Z0-9_-]{1,63}).
func dbName(tb testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, tb.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "ml_" + name + "_" + hex.EncodeToString(b[:])
}

// connect returns a client of its own, as a separate process would have,
// disconnected when tb ends.
func connect(tb testing.TB, uri string) *mongo.Client {
	tb.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		tb.Fatalf("mongo.Connect: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	return c
}

// locks returns the lock collection of database db through a new client.
func locks(tb testing.TB, uri, db string) *mongo.Collection {
	return connect(tb, uri).Database(db).Collection("locks")
}

func mustNew(tb testing.TB, coll *mongo.Collection, opts ...mongolock.Option) *mongolock.Backend {
	tb.Helper()
	b, err := mongolock.New(coll, opts...)
	if err != nil {
		tb.Fatalf("mongolock.New: %v", err)
	}
	return b
}

func ctxFor(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// fixed returns a clock stopped at t.
func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }
