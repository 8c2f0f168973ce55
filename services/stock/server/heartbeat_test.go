package server_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
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
	waitSettled(t, attempts, "the heartbeat loop did not settle them")
	left, orders := ledger(t, client, reps[0], "ghost")
	if left != 4 || len(orders) != 1 {
		t.Fatalf("stock %d, orders %d: want 4 and 1", left, len(orders))
	}
}

// TestBeatNeverWaitsForSettling: a replica that settles a dead replica's
// attempts keeps beating meanwhile, however long settling takes (held
// here), so that the others never take it for dead and fail its own keyed
// requests.
func TestBeatNeverWaitsForSettling(t *testing.T) {
	t.Parallel() // its own database and skus; it mostly waits
	var armed atomic.Bool
	var once sync.Once
	held, release := make(chan struct{}), make(chan struct{})
	var db string
	reps := startReplicas(t, 1, func(c *server.Config) {
		c.RecoveryEvery, c.DeadAfter = time.Hour, time.Second
		db = c.DB
		server.SetBeforeKeysPass(c, func() {
			if armed.Load() {
				once.Do(func() {
					close(held)
					<-release
				})
			}
		})
	})
	var released sync.Once
	unhold := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unhold) // before the replica's Shutdown, which waits for the pass

	mc, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	put(t, client, reps[0], "held", 5)
	dead, err := mongostore.NewStore(mc.Database(db), mongostore.StoreOptions{Replica: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = dead.DecrementOnce(context.Background(), killed{mongostore.NewAtomic(dead)}, inventory.Request{SKU: "held", Qty: 1, Key: "K"}, "atomic")
	}()
	<-done
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no keys pass began within 30s of the dead replica's last beat")
	}

	beats := mc.Database(db).Collection(mongostore.HeartbeatsCollection)
	beatOf := func() int64 {
		var hb struct {
			Beat int64 `bson:"beat"`
		}
		if err := beats.FindOne(t.Context(), bson.D{{Key: "replica", Value: reps[0].name}}).Decode(&hb); err != nil {
			t.Fatal(err)
		}
		return hb.Beat
	}
	from := beatOf()
	for deadline := time.Now().Add(20 * time.Second); beatOf() < from+3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s's beat stood at %d for 20s while a keys pass was held", reps[0].name, beatOf())
		}
	}
	unhold()
	waitSettled(t, mc.Database(db).Collection(mongostore.AttemptsCollection), "the released pass did not settle them")
}

// waitSettled waits until no idempotency attempt is open, at most 30 s.
func waitSettled(t *testing.T, attempts *mongo.Collection, why string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n, err := attempts.CountDocuments(t.Context(), bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d attempts of the dead replica still open after 30s: %s", n, why)
		}
	}
}

// TestStartRefusesConflicts: a replica does not start beside a live one
// with its name, nor beside live ones with another heartbeat timeout; it
// starts once its namesake has stopped beating.
func TestStartRefusesConflicts(t *testing.T) {
	var cfg server.Config
	startReplicas(t, 1, func(c *server.Config) {
		c.DeadAfter = time.Second
		cfg = *c
	})
	logger := server.NewLogger(t.Output(), cfg)

	if _, err := server.New(t.Context(), cfg, logger); !errors.Is(err, mongostore.ErrReplicaInUse) {
		t.Errorf("second process as %s: %v, want mongostore.ErrReplicaInUse", cfg.Replica, err)
	} else {
		t.Log(err)
	}
	other := cfg
	other.Replica, other.DeadAfter = "replica-z", 2*time.Second
	if _, err := server.New(t.Context(), other, logger); !errors.Is(err, mongostore.ErrDeadAfterDiffers) {
		t.Errorf("replica with --heartbeat-timeout %v beside %v: %v, want mongostore.ErrDeadAfterDiffers", other.DeadAfter, cfg.DeadAfter, err)
	} else {
		t.Log(err)
	}

	// A replica that stopped beating (killed, or shut down) does not
	// stop its successor of the same name.
	gone := cfg
	gone.Replica = "replica-gone"
	first, err := server.New(t.Context(), gone, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	newServer(t, gone)
}
