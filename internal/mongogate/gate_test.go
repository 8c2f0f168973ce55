package mongogate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

const (
	workers = 32
	// stockN is small because FerretDB's pure-Go SQLite is slow under -race;
	// with twice as many units as workers, every decrement is contended.
	stockN = 64
)

// decrementAll stores a document with the given stock, then runs workers
// goroutines that each take one unit with a conditional $inc until nothing
// matches, and returns the number of updates the server reported as applied.
func decrementAll(t *testing.T, coll *mongo.Collection, stock int) int64 {
	t.Helper()
	ctx := t.Context()

	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "sku"}, {Key: "stock", Value: stock}}); err != nil {
		t.Fatalf("insert: %v", err)
	}

	var (
		modified atomic.Int64
		wg       sync.WaitGroup
		errs     = make(chan error, workers)
	)
	for range workers {
		wg.Go(func() {
			for {
				res, err := coll.UpdateOne(ctx,
					bson.D{{Key: "_id", Value: "sku"}, {Key: "stock", Value: bson.D{{Key: "$gte", Value: 1}}}},
					bson.D{{Key: "$inc", Value: bson.D{{Key: "stock", Value: -1}}}})
				if err != nil {
					errs <- err
					return
				}
				if res.MatchedCount == 0 {
					return
				}
				modified.Add(res.ModifiedCount)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("update: %v", err)
	}

	return modified.Load()
}

func finalStock(t *testing.T, coll *mongo.Collection) int64 {
	t.Helper()

	var doc struct {
		Stock int64 `bson:"stock"`
	}
	if err := coll.FindOne(t.Context(), bson.D{{Key: "_id", Value: "sku"}}).Decode(&doc); err != nil {
		t.Fatalf("find: %v", err)
	}
	return doc.Stock
}

// TestConditionalDecrementIsExact is the reason the gate exists: without it,
// FerretDB v1 applies several conditional decrements that matched the same
// stock value, overselling.
func TestConditionalDecrementIsExact(t *testing.T) {
	t.Parallel()

	g := startGate(t, startFerretDB(t))
	coll := connect(t, g.Addr(), options.Client().SetMaxPoolSize(workers)).Database("gate").Collection("stock")

	start := time.Now()
	modified := decrementAll(t, coll, stockN)
	t.Logf("%d conditional decrements by %d goroutines through the gate in %v", stockN, workers, time.Since(start))

	if modified != stockN {
		t.Errorf("sum of ModifiedCount = %d, want %d", modified, stockN)
	}
	if got := finalStock(t, coll); got != 0 {
		t.Errorf("final stock = %d, want 0", got)
	}
	if w := g.writes.Load(); w < stockN {
		t.Errorf("gate serialized %d writes, want at least %d", w, stockN)
	}
}

// TestWithoutGate measures the anomaly the gate prevents. It asserts nothing
// about FerretDB, whose races depend on scheduling; it only reports them.
func TestWithoutGate(t *testing.T) {
	if os.Getenv("MONGOGATE_MEASURE") == "" {
		t.Skip("measurement only; set MONGOGATE_MEASURE=1 to run")
	}
	t.Parallel()

	coll := connect(t, startFerretDB(t), options.Client().SetMaxPoolSize(workers)).Database("gate").Collection("stock")

	// A small stock keeps this short: every lost race costs FerretDB a write.
	const stock = 20
	modified := decrementAll(t, coll, stock)
	t.Logf("without the gate: sum of ModifiedCount = %d (want %d), final stock = %d (want 0)",
		modified, stock, finalStock(t, coll))
}

// TestConditionalUpsertHasOneWinner models taking a lease: an upsert whose
// filter matches only an expired holder. With a live holder present the
// upsert must fail with a duplicate key error instead of inserting a second
// document or overwriting the holder.
func TestConditionalUpsertHasOneWinner(t *testing.T) {
	t.Parallel()

	g := startGate(t, startFerretDB(t))
	coll := connect(t, g.Addr(), options.Client().SetMaxPoolSize(workers)).Database("gate").Collection("leases")
	ctx := t.Context()

	for _, tc := range []struct {
		name   string
		filter func(now time.Time, owner string) bson.D
	}{{
		name: "expired",
		filter: func(now time.Time, _ string) bson.D {
			return bson.D{{Key: "_id", Value: "expired"}, {Key: "expiresAt", Value: bson.D{{Key: "$lt", Value: now}}}}
		},
	}, {
		name: "or",
		filter: func(now time.Time, owner string) bson.D {
			return bson.D{{Key: "_id", Value: "or"}, {Key: "$or", Value: bson.A{
				bson.D{{Key: "expiresAt", Value: bson.D{{Key: "$lt", Value: now}}}},
				bson.D{{Key: "owner", Value: owner}},
			}}}
		},
	}} {
		var (
			winners atomic.Int64
			dupKeys atomic.Int64
			wg      sync.WaitGroup
			errs    = make(chan error, workers)
		)
		for i := range workers {
			wg.Go(func() {
				owner := fmt.Sprintf("owner-%d", i)
				now := time.Now()
				err := coll.FindOneAndUpdate(ctx, tc.filter(now, owner),
					bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: owner}, {Key: "expiresAt", Value: now.Add(time.Hour)}}}},
					options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Err()
				switch {
				case err == nil:
					winners.Add(1)
				case mongo.IsDuplicateKeyError(err):
					dupKeys.Add(1)
				default:
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("%s: unexpected error: %v", tc.name, err)
		}

		if w := winners.Load(); w != 1 {
			t.Errorf("%s: %d winners, want 1 (duplicate key errors: %d)", tc.name, w, dupKeys.Load())
		}

		// The winner must still hold the lease it was told it won.
		var holder struct {
			Owner string `bson:"owner"`
		}
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: tc.name}}).Decode(&holder); err != nil {
			t.Fatalf("%s: find holder: %v", tc.name, err)
		}
		t.Logf("%s: holder %s, %d duplicate key errors", tc.name, holder.Owner, dupKeys.Load())
	}
}

// TestDuplicateKeyOnConditionalUpsert pins down what FerretDB answers when a
// conditional upsert finds the _id taken by a document that does not match.
func TestDuplicateKeyOnConditionalUpsert(t *testing.T) {
	t.Parallel()

	g := startGate(t, startFerretDB(t))
	coll := connect(t, g.Addr()).Database("gate").Collection("leases")
	ctx := t.Context()

	future := time.Now().Add(time.Hour)
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "owner", Value: "a"}, {Key: "expiresAt", Value: future}}); err != nil {
		t.Fatalf("insert: %v", err)
	}

	err := coll.FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: "k"}, {Key: "expiresAt", Value: bson.D{{Key: "$lt", Value: time.Now()}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "owner", Value: "b"}, {Key: "expiresAt", Value: future}}}},
		options.FindOneAndUpdate().SetUpsert(true)).Err()

	var se mongo.ServerError
	if !errors.As(err, &se) {
		t.Fatalf("want a server error, got %T: %v", err, err)
	}
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		t.Logf("FerretDB answered CommandError code=%d name=%q message=%q", ce.Code, ce.Name, ce.Message)
	} else {
		t.Logf("FerretDB answered %T: %v", err, err)
	}
	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("mongo.IsDuplicateKeyError(%v) = false, want true", err)
	}
}

// TestMoreToComeRepliesAreDropped sends an unacknowledged write, to which
// FerretDB replies although the client expects no reply. Forwarded, that
// stray reply would be read as the answer to the next command on the same
// connection; the single-connection pool makes sure there is one.
func TestMoreToComeRepliesAreDropped(t *testing.T) {
	t.Parallel()

	g := startGate(t, startFerretDB(t))
	client := connect(t, g.Addr(), options.Client().SetMaxPoolSize(1))
	ctx := t.Context()

	w0 := client.Database("gate").Collection("w0", options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
	for i := range 5 {
		if _, err := w0.InsertOne(ctx, bson.D{{Key: "_id", Value: i}}); err != nil {
			t.Fatalf("unacknowledged insert: %v", err)
		}
	}

	// An acknowledged command on the same connection gets its own reply.
	n, err := client.Database("gate").Collection("w0").CountDocuments(ctx, bson.D{})
	if err != nil {
		t.Fatalf("count after unacknowledged inserts: %v", err)
	}
	if n != 5 {
		t.Errorf("count = %d, want 5", n)
	}
	if d := g.strays.Load(); d != 5 {
		t.Errorf("dropped %d replies, want 5", d)
	}
}

// TestCloseCutsConnections checks that Close returns while clients are still
// connected, and that later operations fail instead of hanging.
func TestCloseCutsConnections(t *testing.T) {
	t.Parallel()

	g := startGate(t, startFerretDB(t))
	client := connect(t, g.Addr())
	if err := client.Ping(t.Context(), nil); err != nil {
		t.Fatalf("ping: %v", err)
	}

	if err := g.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := client.Ping(ctx, nil); err == nil {
		t.Errorf("ping through a closed gate succeeded")
	}
}

// TestSameDocumentConditionalUpdatesNeverBothApply races two conditional
// updates on one document, from two connections, round after round: the
// gate must let exactly one apply each time.
func TestSameDocumentConditionalUpdatesNeverBothApply(t *testing.T) {
	t.Parallel()

	g := startGate(t, startFerretDB(t))
	ctx := t.Context()
	colls := []*mongo.Collection{
		connect(t, g.Addr()).Database("gate").Collection("race"),
		connect(t, g.Addr()).Database("gate").Collection("race"),
	}

	const rounds = 40
	for r := range rounds {
		id := fmt.Sprintf("doc-%d", r)
		if _, err := colls[0].InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "v", Value: 0}, {Key: "n", Value: 0}}); err != nil {
			t.Fatalf("insert: %v", err)
		}
		var (
			applied atomic.Int64
			wg      sync.WaitGroup
			start   = make(chan struct{})
		)
		for _, c := range colls {
			wg.Go(func() {
				<-start
				res, err := c.UpdateOne(ctx,
					bson.D{{Key: "_id", Value: id}, {Key: "v", Value: 0}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 1}}}, {Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
				if err != nil {
					t.Errorf("update: %v", err)
					return
				}
				applied.Add(res.ModifiedCount)
			})
		}
		close(start)
		wg.Wait()

		var doc struct {
			N int `bson:"n"`
		}
		if err := colls[0].FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
			t.Fatalf("find: %v", err)
		}
		if applied.Load() != 1 || doc.N != 1 {
			t.Fatalf("round %d: %d updates applied, n = %d; want exactly one", r, applied.Load(), doc.N)
		}
	}
	if n := g.exclusive.Load(); n != 0 {
		t.Errorf("%d writes ran alone; every write here names its document", n)
	}
}

// TestManyDocumentsWriteInParallel runs conditional decrements on many
// documents at once: every one must apply, and writes to different
// documents must have overlapped in the gate (which the old process-wide
// mutex never let happen). The rate is logged, not asserted.
func TestManyDocumentsWriteInParallel(t *testing.T) {
	t.Parallel()

	g := startGate(t, startFerretDB(t))
	ctx := t.Context()
	const docs, each = 16, 8
	coll := connect(t, g.Addr(), options.Client().SetMaxPoolSize(docs)).Database("gate").Collection("many")
	for d := range docs {
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: fmt.Sprintf("sku-%d", d)}, {Key: "stock", Value: each}}); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}

	var modified atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for d := range docs {
		wg.Go(func() {
			for range each {
				res, err := coll.UpdateOne(ctx,
					bson.D{{Key: "_id", Value: fmt.Sprintf("sku-%d", d)}, {Key: "stock", Value: bson.D{{Key: "$gte", Value: 1}}}},
					bson.D{{Key: "$inc", Value: bson.D{{Key: "stock", Value: -1}}}})
				if err != nil {
					t.Errorf("update: %v", err)
					return
				}
				modified.Add(res.ModifiedCount)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d conditional decrements on %d documents in %v (%.0f/s), at most %d writes at once in the gate",
		docs*each, docs, took, float64(docs*each)/took.Seconds(), g.locks.peak.Load())

	if got := modified.Load(); got != docs*each {
		t.Errorf("%d decrements applied, want %d", got, docs*each)
	}
	cur, err := coll.Find(ctx, bson.D{{Key: "stock", Value: bson.D{{Key: "$ne", Value: 0}}}})
	if err != nil {
		t.Fatal(err)
	}
	var left []bson.M
	if err := cur.All(ctx, &left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("documents with stock left: %v", left)
	}
	if p := g.locks.peak.Load(); p < 2 {
		t.Errorf("at most %d write at once in the gate: writes to different documents did not overlap", p)
	}
	if n := g.locks.waiting(); n != 0 {
		t.Errorf("%d document locks left after every write", n)
	}
}
