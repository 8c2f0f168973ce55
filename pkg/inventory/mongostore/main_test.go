package mongostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
)

// mongoURI is the one MongoDB the package's tests share, each in a database
// of its own: starting the embedded FerretDB once saves seconds per test.
// redisAddr is the one Redis they share, each under a key prefix of its
// own (redis-stock's tests).
var mongoURI, redisAddr string

func TestMain(m *testing.M) {
	devstoretest.Main(m, devstoretest.SharedMongo|devstoretest.SharedRedis, func(s devstoretest.Shared) {
		mongoURI, redisAddr = s.MongoURI, s.RedisAddr
	})
}

// testDB returns a database of the test's own through a client of its own.
func testDB(t testing.TB) *mongo.Database {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatalf("mongo.Connect: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return c.Database("inv_" + name + "_" + hex.EncodeToString(b[:]))
}

func testStore(t testing.TB) *Store {
	t.Helper()
	s, err := NewStore(testDB(t), StoreOptions{Replica: "test", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	if err := s.EnsureIndexes(t.Context()); err != nil {
		t.Fatalf("EnsureIndexes: %v", err)
	}
	return s
}

func mustPut(t testing.TB, s *Store, sku string, stock int64) inventory.Item {
	t.Helper()
	it, err := s.Put(t.Context(), sku, stock)
	if err != nil {
		t.Fatalf("Put(%q, %d): %v", sku, stock, err)
	}
	return it
}

func mustGet(t testing.TB, s *Store, sku string) inventory.Item {
	t.Helper()
	it, err := s.Get(t.Context(), sku)
	if err != nil {
		t.Fatalf("Get(%q): %v", sku, err)
	}
	return it
}

func mustCount(t testing.TB, s *Store, sku string) int64 {
	t.Helper()
	n, err := s.orders.CountDocuments(t.Context(), bson.D{{Key: "sku", Value: sku}})
	if err != nil {
		t.Fatalf("count the orders of %q: %v", sku, err)
	}
	return n
}

// allOrders reads every order of sku, page by page.
func allOrders(t testing.TB, s *Store, sku string, since time.Time) []inventory.Order {
	t.Helper()
	var all []inventory.Order
	q := inventory.OrdersQuery{SKU: sku, Since: since, Limit: 7}
	for {
		page, err := s.Orders(t.Context(), q)
		if err != nil {
			t.Fatalf("Orders(%+v): %v", q, err)
		}
		all = append(all, page.Orders...)
		if page.Next == "" {
			return all
		}
		q.After = page.Next
	}
}
