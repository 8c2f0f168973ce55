package devstore_test

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/internal/testskip"
)

func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()

	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mongoClient(t *testing.T, uri string) *mongo.Client {
	t.Helper()

	c, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatalf("mongo.Connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(t.Context()) })
	return c
}

func TestRedisRestart(t *testing.T) {
	t.Parallel()

	r := devstoretest.Redis(t)
	rdb := redisClient(t, r.Addr)
	ctx := t.Context()
	t.Logf("Redis kind %s at %s", r.Kind, r.Addr)

	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	if r.Kind != devstore.KindRedisServer {
		if err := r.Restart(ctx); !errors.Is(err, devstore.ErrCannotRestart) {
			t.Errorf("Restart of %s: got %v, want ErrCannotRestart", r.Kind, err)
		}
		return
	}

	if err := r.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	// A client of its own, without retries: rdb's pool would back off
	// after failed dials and slow the rest of the test down.
	probe := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	if err := probe.Ping(ctx).Err(); err == nil {
		t.Errorf("PING answered while redis-server was stopped")
	}
	_ = probe.Close()
	if err := r.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := r.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}

	// The same client reconnects to the same address.
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	// No persistence: a restart is a clean slate.
	if n, err := rdb.Exists(ctx, "before").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS before after Restart = %d, %v; want 0, nil", n, err)
	}
}

func TestRedisExternal(t *testing.T) {
	own := devstoretest.Redis(t)
	t.Setenv("REDIS_ADDR", own.Addr)

	r := devstoretest.Redis(t)
	if r.Kind != devstore.KindExternal || r.Addr != own.Addr {
		t.Fatalf("got kind %s at %s, want %s at %s", r.Kind, r.Addr, devstore.KindExternal, own.Addr)
	}
	if err := r.Restart(t.Context()); !errors.Is(err, devstore.ErrCannotRestart) {
		t.Errorf("Restart: got %v, want ErrCannotRestart", err)
	}
}

func TestRedisMiniredisFallback(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	t.Setenv("PATH", t.TempDir()) // no redis-server to be found

	r := devstoretest.Redis(t)
	if r.Kind != devstore.KindMiniredis {
		t.Fatalf("kind = %s, want %s", r.Kind, devstore.KindMiniredis)
	}

	rdb := redisClient(t, r.Addr)
	ctx := t.Context()
	if err := rdb.Set(ctx, "lease", "me", time.Millisecond).Err(); err != nil {
		t.Fatalf("SET PX: %v", err)
	}
	// Only a lower bound on elapsed time: the TTL must run out in real time,
	// without anyone calling FastForward.
	time.Sleep(20 * time.Millisecond)
	if err := rdb.Get(ctx, "lease").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after TTL: got %v, want redis.Nil", err)
	}

	if err := r.Restart(ctx); !errors.Is(err, devstore.ErrCannotRestart) {
		t.Errorf("Restart: got %v, want ErrCannotRestart", err)
	}
}

func TestMongoRestart(t *testing.T) {
	t.Parallel()

	m := devstoretest.Mongo(t)
	client := mongoClient(t, m.URI)
	ctx := t.Context()
	t.Logf("MongoDB kind %s at %s", m.Kind, m.URI)

	if err := client.Ping(ctx, nil); err != nil {
		t.Fatalf("ping: %v", err)
	}

	coll := client.Database("devstore").Collection("restart")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "n", Value: 1}}); err != nil {
		t.Fatalf("insert: %v", err)
	}

	if m.Kind != devstore.KindFerretDB {
		if err := m.Restart(ctx); !errors.Is(err, devstore.ErrCannotRestart) {
			t.Errorf("Restart of %s: got %v, want ErrCannotRestart", m.Kind, err)
		}
		return
	}

	if err := m.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}

	// A fresh client, through the same URI, reads what was written before.
	var doc struct {
		N int `bson:"n"`
	}
	fresh := mongoClient(t, m.URI).Database("devstore").Collection("restart")
	if err := fresh.FindOne(ctx, bson.D{{Key: "_id", Value: "k"}}).Decode(&doc); err != nil {
		t.Fatalf("find after Restart: %v", err)
	}
	if doc.N != 1 {
		t.Errorf("n = %d after Restart, want 1", doc.N)
	}

	// The client from before the restart can still write. Its pooled
	// connections were cut, and it only notices on use: the first operation
	// fails with a network error, which clears the pool. The driver does not
	// retry writes on its own against a standalone server, so the caller does.
	var (
		res *mongo.UpdateResult
		err error
	)
	for range 3 {
		res, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "k"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
		if !mongo.IsNetworkError(err) {
			break
		}
		t.Logf("update with the old client after Restart: %v", err)
	}
	if err != nil {
		t.Fatalf("update with the old client after Restart: %v", err)
	}
	if res.ModifiedCount != 1 {
		t.Errorf("ModifiedCount = %d, want 1", res.ModifiedCount)
	}
}

// TestFerretDBBackends starts the embedded FerretDB on each backend this
// machine has: each must serve through the gate, keep one-document
// atomicity for concurrent conditional updates, and keep its data across a
// restart.
func TestFerretDBBackends(t *testing.T) {
	t.Parallel()

	for _, backend := range []string{devstore.BackendPostgreSQL, devstore.BackendSQLite} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			if backend == devstore.BackendPostgreSQL && !devstore.HavePostgres() {
				testskip.Missing(t, testskip.PostgreSQL, "no postgres and initdb on PATH or in /usr/lib/postgresql")
			}
			ctx := t.Context()
			m, err := devstore.StartFerretDBOn(ctx, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})), backend)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := m.Close(); err != nil {
					t.Error(err)
				}
			})
			if m.Backend != backend {
				t.Fatalf("Backend = %q, want %q", m.Backend, backend)
			}
			coll := mongoClient(t, m.URI).Database("devstore").Collection("backend")
			if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "n", Value: 20}}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var applied atomic.Int64
			for range 8 {
				wg.Go(func() {
					for {
						res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "k"}, {Key: "n", Value: bson.D{{Key: "$gte", Value: 1}}}},
							bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: -1}}}})
						if err != nil {
							t.Error(err)
							return
						}
						if res.ModifiedCount == 0 {
							return
						}
						applied.Add(1)
					}
				})
			}
			wg.Wait()
			if applied.Load() != 20 {
				t.Errorf("%d conditional decrements applied to a stock of 20", applied.Load())
			}
			if err := m.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			var doc struct {
				N int `bson:"n"`
			}
			fresh := mongoClient(t, m.URI).Database("devstore").Collection("backend")
			if err := fresh.FindOne(ctx, bson.D{{Key: "_id", Value: "k"}}).Decode(&doc); err != nil || doc.N != 0 {
				t.Fatalf("after Restart: n = %d, %v; want 0", doc.N, err)
			}
		})
	}
}

// TestRedisAOF: after SetAOF, a crash (SIGKILL) and a start keep every
// write; with the file off again, a crash and a start lose them.
func TestRedisAOF(t *testing.T) {
	t.Parallel()
	r := devstoretest.Redis(t)
	ctx := t.Context()
	if err := r.SetAOF(ctx, "sometimes"); !errors.Is(err, devstore.ErrAOFPolicy) && r.Kind == devstore.KindRedisServer {
		t.Errorf("SetAOF(sometimes): %v, want ErrAOFPolicy", err)
	}
	if r.Kind != devstore.KindRedisServer {
		if err := r.SetAOF(ctx, "always"); !errors.Is(err, devstore.ErrCannotRestart) {
			t.Errorf("SetAOF on %s: %v, want ErrCannotRestart", r.Kind, err)
		}
		if err := r.Crash(); !errors.Is(err, devstore.ErrCannotRestart) {
			t.Errorf("Crash of %s: %v, want ErrCannotRestart", r.Kind, err)
		}
		return
	}
	rdb := redisClient(t, r.Addr)
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if err := r.SetAOF(ctx, "always"); err != nil {
		t.Fatalf("SetAOF(always): %v", err)
	}
	if err := rdb.Set(ctx, "after", "2", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	crash := func() {
		t.Helper()
		if err := r.Crash(); err != nil {
			t.Fatalf("Crash: %v", err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
	}
	crash()
	if n, err := rdb.Exists(ctx, "before", "after").Result(); err != nil || n != 2 {
		t.Errorf("EXISTS before after a crash with the append-only file = %d, %v; want 2 (both kept)", n, err)
	}
	if err := r.SetAOF(ctx, ""); err != nil {
		t.Fatalf("SetAOF off: %v", err)
	}
	crash()
	if n, err := rdb.Exists(ctx, "before", "after").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS before after a crash without the append-only file = %d, %v; want 0", n, err)
	}
}
