package server_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
	"github.com/stocklock/stocklock/services/stock/server"
)

// TestStartCreatesCollections: a replica creates every collection it
// writes to before it serves, so that none is created by a request, within
// its deadline. A creation whose connection drops is tried again; when
// every attempt fails, start-up fails and says what it could not do.
func TestStartCreatesCollections(t *testing.T) {
	t.Parallel() // its own databases; it mostly waits
	p := devstoretest.MongoProxy(t, mongoURI)
	through := "mongodb://" + p.Addr() + "/?serverSelectionTimeoutMS=2000&connectTimeoutMS=2000&retryWrites=false&retryReads=false"

	cfg := testConfig(t, "r1")
	cfg.MongoURI = through
	p.Cut("create\x00")
	newServer(t, cfg)
	c, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	names, err := c.Database(cfg.DB).ListCollectionNames(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{server.LocksCollection, mongostore.ItemsCollection, mongostore.OrdersCollection,
		mongostore.IdempotencyCollection, mongostore.AttemptsCollection, mongostore.HeartbeatsCollection, mongostore.HoldsCollection} {
		if !slices.Contains(names, want) {
			t.Errorf("collection %s missing after start-up; the database has %v", want, names)
		}
	}

	failing := testConfig(t, "r1")
	failing.MongoURI = through
	for range server.PrepareAttempts {
		p.Cut("create\x00")
	}
	_, err = server.New(t.Context(), failing, server.NewLogger(t.Output(), failing))
	if err == nil || !strings.Contains(err.Error(), "create the store's collections: "+strconv.Itoa(server.PrepareAttempts)+" attempts failed") {
		t.Fatalf("start-up with every creation cut: %v; want it to fail saying so", err)
	}
	t.Log(err)
}
