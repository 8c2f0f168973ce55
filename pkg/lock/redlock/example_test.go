package redlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/redlock"
)

// A lock on five independent servers. Here they are in-process stand-ins
// (miniredis) so that the example runs anywhere; in production they are
// five redis-servers on separate machines, without replication.
func Example() {
	var clients []redis.UniversalClient
	for range 5 {
		srv := miniredis.NewMiniRedis()
		srv.ClockTTL(true) // expire keys in real time
		if err := srv.Start(); err != nil {
			log.Fatal(err)
		}
		defer srv.Close()
		// No retries: a round must not wait for a server that is down.
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		clients = append(clients, c)
	}

	backend, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := lock.New(backend, lock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	first, err := locker.Acquire(ctx, "sku:42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("majority:", backend.Quorum(), "of", len(clients))

	// The next lease on the key, once this one is released, carries a
	// higher fencing token.
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := locker.Acquire(ctx, "sku:42")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)
	fmt.Println("second token higher:", second.Token() > first.Token())
	// Output:
	// majority: 3 of 5
	// second token higher: true
}
