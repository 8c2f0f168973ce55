package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
)

// The examples need a Redis server, so they are compiled but not run: they
// have no Output comment.

// The whole life of a lock: take it, do fenced work under its context, give
// it back.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	// The locker's subscription ends with the client.
	locker, err := redislock.NewLocker(client, lock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	// Acquire waits until the key is free (woken by the holder's release),
	// or until ctx ends.
	lease, err := locker.Acquire(ctx, "sku:42")
	if err != nil {
		log.Fatal(err)
	}
	// Release frees the key at once instead of at the TTL; it stops the
	// watchdog that renews the lease in the meantime.
	defer lease.Release(context.Background())

	// Guard ends the work when the request's ctx ends or the lease is lost,
	// whichever comes first.
	work, stop := lease.Guard(ctx)
	defer stop()

	// The fencing token goes with every write the lock protects: the store
	// refuses a write whose token is lower than one it has seen, so a holder
	// that paused past its lease cannot overwrite its successor's work.
	if err := fencedWrite(work, "sku:42", lease.Token(), 7); err != nil {
		log.Fatal(err)
	}
}

// fencedWrite stands for a write to a resource that checks fencing tokens,
// like the stock service's inventory table.
func fencedWrite(ctx context.Context, key string, token uint64, value int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("write %s: %w", key, context.Cause(ctx))
	}
	return nil
}

// A single attempt: do the work if the key is free, skip it otherwise.
func Example_tryAcquire() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker, err := redislock.NewLocker(client)
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	lease, err := locker.TryAcquire(ctx, "nightly-report")
	switch {
	case errors.Is(err, lock.ErrNotAcquired):
		fmt.Println("another replica is running the report")
		return
	case err != nil:
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// A long job watches Done: the watchdog renews the lease, and closes
	// Done if a renewal finds it lost.
	select {
	case <-lease.Done():
		log.Printf("lease lost: %v", lease.Err())
	case <-time.After(time.Second): // the job
	}
}

// New gives control over the key names and the lifetime of the release
// subscription; wrap the backend in a lock.Locker to use it.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	backend, err := redislock.New(client, redislock.WithKeyPrefix("shop:lock:"))
	if err != nil {
		log.Fatal(err)
	}
	defer backend.Close() // stops the subscription

	locker, err := lock.New(backend, lock.WithTTL(3*time.Second), lock.WithRetry(redislock.DefaultRetry))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "order:1001", lock.WithOwner("replica-a"))
	if err != nil {
		log.Fatal(err)
	}
	// Redis now holds shop:lock:{order:1001} = "<token>:replica-a" with a
	// 3 s PX expiry, and shop:lock:{order:1001}:fence = <token>.
	fmt.Println(lease.Key(), lease.Owner())
	_ = lease.Release(ctx)
}
