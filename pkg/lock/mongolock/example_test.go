package mongolock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/mongolock"
)

// The whole life of a lock: acquire, do the work under the lease's context,
// fence every write with the lease's token, release. (Examples here need a
// MongoDB, so they are compiled but not run.)
func Example() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)
	db := client.Database("stock")

	// One collection holds every lock, one document per key. Never put a
	// TTL index on it: tokens must survive releases.
	locker, err := mongolock.NewLocker(db.Collection("locks"), lock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	// Acquire blocks until the key is ours (or ctx ends). The lease renews
	// itself in the background until Release.
	lease, err := locker.Acquire(ctx, "sku:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx) // a second Release is harmless

	// Run the critical section under Guard: it is cancelled the moment the
	// lease is lost, with the reason as its cause.
	work, cancel := lease.Guard(ctx)
	defer cancel()

	// The fenced write. The lease can be lost without our noticing in time
	// (a GC pause, a frozen VM), so the store itself refuses writes from a
	// holder older than the last one it has seen: fence <= our token. A
	// newer holder's write raises fence past us, and ours then matches
	// nothing.
	token := int64(lease.Token())
	res, err := db.Collection("items").UpdateOne(work,
		bson.D{
			{Key: "_id", Value: "sku:42"},
			{Key: "qty", Value: bson.D{{Key: "$gte", Value: 1}}},
			{Key: "fence", Value: bson.D{{Key: "$lte", Value: token}}},
		},
		bson.D{
			{Key: "$inc", Value: bson.D{{Key: "qty", Value: -1}}},
			{Key: "$set", Value: bson.D{{Key: "fence", Value: token}}},
		})
	switch {
	case err != nil:
		log.Printf("write: %v (lease: %v)", err, context.Cause(work))
	case res.MatchedCount == 0:
		log.Printf("sold out, or a newer lock holder (token > %d) has written", token)
	}

	// Release frees the key at once for the next waiter; the lock document
	// stays, so the next token is higher.
	if err := lease.Release(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		log.Printf("release: %v", err)
	}
}

// One attempt, no waiting: being told the key is held is an answer, not an
// error. (This is where the seed's code failed: it returned the server's
// duplicate-key error for exactly this case.)
func ExampleBackend_TryAcquire() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)

	b, err := mongolock.New(client.Database("stock").Collection("locks"))
	if err != nil {
		log.Fatal(err)
	}
	token, err := b.TryAcquire(ctx, "nightly-report", "replica-a", time.Minute)
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		fmt.Println("another replica is running the report")
		return
	case err != nil:
		log.Fatal(err) // the outcome is unknown: the server did not answer
	}
	defer b.Release(ctx, "nightly-report", "replica-a", token)
	fmt.Println("running the report with fencing token", token)
}

// Backend options, then a Locker with lock options of its own.
func ExampleNew() {
	ctx := context.Background()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://localhost:27017"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Disconnect(ctx)

	b, err := mongolock.New(client.Database("stock").Collection("locks"),
		// The hosts' clocks are kept within 100 ms by chrony: take over
		// crashed holders' keys sooner than the default allows.
		mongolock.WithSkew(100*time.Millisecond),
	)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lock.New(b, lock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	_ = locker
}
