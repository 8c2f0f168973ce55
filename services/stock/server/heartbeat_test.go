package server_test

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory/mongostore"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/services/stock/server"
)

// killed is a strategy whose replica is killed -9 after it reserved the
// key and before its stock write: its Decrement ends the goroutine.
type killed struct{ inventory.Strategy }

func (killed) Decrement(context.Context, inventory.Request) (inventory.Sale, error) {
	runtime.Goexit()
	return inventory.Sale{}, nil
}

// TestDeadReplicaRequestSettles: a replica that beat once dies between
// reserving two keys and their stock writes. The live replica, whose
// periodic recovery runs only hourly, must give both attempts up within
// seconds of the dead one's heartbeat standing still: a retry of the first
// key sells at once, and the second attempt is settled by the heartbeat
// loop alone, with no retry to prompt it.
func TestDeadReplicaRequestSettles(t *testing.T) {
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	var db string
	reps := startReplicas(t, 1, func(c *server.Config) {
		c.RecoveryEvery, c.DeadAfter = time.Hour, time.Second
		db = c.DB
	})
	put(t, client, reps[0], "ghost", 5)

	mc, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	dead, err := mongostore.NewStore(mc.Database(db), mongostore.StoreOptions{Replica: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"retried", "forgotten"} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _, _ = dead.DecrementOnce(context.Background(), killed{mongostore.NewAtomic(dead)}, inventory.Request{SKU: "ghost", Qty: 1, Key: key}, "atomic")
		}()
		<-done
	}
	attempts := mc.Database(db).Collection(mongostore.AttemptsCollection)
	if n, err := attempts.CountDocuments(t.Context(), bson.D{}); err != nil || n != 2 {
		t.Fatalf("attempts of the dead replica: %d, %v; want 2", n, err)
	}

	var s sale
	for try := 1; ; try++ {
		s = decrementWithKey(t, client, reps[0], "ghost", "retried", `{"qty":1,"strategy":"atomic"}`)
		if s.status == http.StatusOK {
			break
		}
		if s.status != http.StatusConflict || s.Error != "idempotency_in_progress" || try == 10 {
			t.Fatalf("retry %d of the dead replica's key: %d %s; want a sale once its heartbeat stood still", try, s.status, s.Error)
		}
	}
	if s.replayed || s.Replica != reps[0].name {
		t.Fatalf("retry: %+v; want a new sale by %s", s, reps[0].name)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		n, err := attempts.CountDocuments(t.Context(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d attempts of the dead replica still open after 30s: the heartbeat loop did not settle them", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	left, orders := ledger(t, client, reps[0], "ghost")
	if left != 4 || len(orders) != 1 {
		t.Fatalf("stock %d, orders %d: want 4 and 1", left, len(orders))
	}
}
