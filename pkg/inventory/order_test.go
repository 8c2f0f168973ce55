package inventory

import (
	"log/slog"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore"
)

// TestOrderInsertSurvivesRestart restarts a MongoDB-compatible server
// under two clients that both have pooled connections. A plain insert on
// the first fails (the server cut its connection): that is the fault. The
// ledger insert on the second must still record its order, exactly once,
// because the stock of that sale is already taken.
func TestOrderInsertSurvivesRestart(t *testing.T) {
	mg := devstore.MongoT(t) // a server of its own: the restart must not hit other tests
	if mg.Kind != devstore.KindFerretDB {
		t.Skipf("needs a server the test can restart; this one is %s", mg.Kind)
	}
	connect := func() *mongo.Client {
		c, err := mongo.Connect(options.Client().ApplyURI(mg.URI))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Disconnect(t.Context()) })
		return c
	}
	control, client := connect(), connect()
	db := client.Database("ledger")
	s, err := NewStore(db, StoreOptions{Replica: "r", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctl := control.Database("ledger").Collection("control")
	// Open pooled connections on both clients.
	if _, err := ctl.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "warm"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.insertOrder(t.Context(), Order{ID: "warm", SKU: "w", Qty: 1, Replica: "r"}); err != nil {
		t.Fatal(err)
	}

	if err := mg.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.InsertOne(t.Context(), bson.D{{Key: "_id", Value: "after"}}); err == nil {
		t.Log("note: the control insert survived the restart; the fault did not bite this time")
	} else if !transient(err) {
		t.Fatalf("the control insert failed with an error that is not transient: %v", err)
	}

	o := Order{ID: "after-restart", SKU: "sku-1", Qty: 2, Replica: "r", Strategy: NameAtomic}
	if err := s.insertOrder(t.Context(), o); err != nil {
		t.Fatalf("order insert after a restart: %v", err)
	}
	n, err := s.CountOrders(t.Context(), "sku-1")
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the ledger holds %d orders of sku-1, want exactly 1", n)
	}
}
