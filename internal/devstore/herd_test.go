package devstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/mongogate"
	"github.com/stocklock/stocklock/internal/testskip"
)

// herd is how many writes one herd sends at once, each to a document of
// its own, so that the gate lets them all through to FerretDB together:
// far more than FerretDB's pool has connections.
const herd = 2000

// TestHerdCannotWedgeTheStore sends herds of concurrent writes through the
// gate into the embedded FerretDB on PostgreSQL, each write to its own
// document (so the gate's per-document order does not serialise them), and
// a third of their clients hang up mid-write. Without the gate's in-flight
// bound, FerretDB's writes each hold one pool connection and wait for a
// second, and the store never answers again. After each herd the store
// must answer a read, every write whose client waited must have been
// answered and applied, and the gate must hold nothing. Three herds in a
// row: a store struck again and again keeps answering.
func TestHerdCannotWedgeTheStore(t *testing.T) {
	t.Parallel()
	// mongogate's TestInFlightBound and TestHungWriteIsCut keep the bound
	// and the cut in the quick tier.
	testskip.Long(t, "sends three herds of 2000 writes into a private FerretDB on PostgreSQL")
	if !devstore.HavePostgres() {
		testskip.Missing(t, testskip.PostgreSQL, "no postgres and initdb on PATH or in /usr/lib/postgresql")
	}
	ctx := t.Context()
	m, err := devstore.StartFerretDBOn(ctx, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), devstore.BackendPostgreSQL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})

	// A pool without a limit, opening connections quickly: the herd
	// reaches the gate on as many connections as it has writers.
	c, err := mongo.Connect(options.Client().ApplyURI(m.URI).SetMaxPoolSize(0).SetMaxConnecting(200))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	coll := c.Database("devstore").Collection("herd")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "probe"}}); err != nil {
		t.Fatal(err)
	}

	for round := range 3 {
		// The documents exist: FerretDB's update keeps the query's rows
		// (and their connection) open only when they matched a document.
		docs := make([]any, herd)
		for i := range docs {
			docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("r%d-%d", round, i)}, {Key: "n", Value: 0}}
		}
		if _, err := coll.InsertMany(ctx, docs); err != nil {
			t.Fatal(err)
		}
		var (
			wg               sync.WaitGroup
			answered, hungUp atomic.Int64
			failed           atomic.Int64
			firstErr         = make(chan error, 1)
			start            = make(chan struct{})
		)
		for i := range herd {
			wg.Go(func() {
				id := fmt.Sprintf("r%d-%d", round, i)
				// A patient client waits as long as the test does; one in
				// three hangs up (the driver closes the connection of a
				// cancelled operation) within 50 ms of sending.
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				patient := i%3 != 0
				if !patient {
					time.AfterFunc(time.Duration(rand.N(50*time.Millisecond)), cancel)
				}
				<-start
				_, err := coll.UpdateOne(wctx, bson.D{{Key: "_id", Value: id}},
					bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
				switch {
				case err == nil:
					answered.Add(1)
				case !patient:
					hungUp.Add(1)
				default:
					failed.Add(1)
					select { // keep the first
					case firstErr <- err:
					default:
					}
				}
			})
		}
		close(start)
		// Every patient write is answered unless the store is wedged; the
		// test's own deadline (go test -timeout) ends a wedged run, and
		// the read below, with its own bound, says so sooner.
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			st, _ := m.GateStats()
			t.Fatalf("herd %d: writes unanswered after 2 minutes: the store is wedged (gate: %+v)", round, st)
		}
		if n := failed.Load(); n > 0 {
			t.Fatalf("herd %d: %d patient writes failed, first: %v", round, n, <-firstErr)
		}

		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := coll.FindOne(rctx, bson.D{{Key: "_id", Value: "probe"}}).Err()
		cancel()
		if err != nil {
			st, _ := m.GateStats()
			t.Fatalf("herd %d: the store did not answer a read after the herd: %v (gate: %+v)", round, err, st)
		}
		// Every patient write applied once.
		n, err := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$regex", Value: fmt.Sprintf("^r%d-", round)}}}, {Key: "n", Value: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if n < answered.Load() {
			t.Errorf("herd %d: %d documents written once, fewer than the %d writes answered", round, n, answered.Load())
		}
		// The gate lets go of everything once the herd is answered: the
		// writes of clients that hung up end upstream on their own.
		var st mongogate.Stats
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st, _ = m.GateStats()
			if st.Documents == 0 && st.InFlight == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("herd %d: the gate still holds %d documents and %d requests in flight 30 s after the herd", round, st.Documents, st.InFlight)
			}
		}
		t.Logf("herd %d: %d answered, %d hung up; gate: %d writes, %d dropped before forwarding, %d abandoned",
			round, answered.Load(), hungUp.Load(), st.Writes, st.Dropped, st.Abandoned)
		if st.Abandoned != 0 {
			t.Errorf("herd %d: %d writes abandoned after the hung-write limit: no write should take that long", round, st.Abandoned)
		}
	}
}
