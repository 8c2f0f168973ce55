package etcdlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/etcdlock"
)

// writeStock stands for a write to the protected resource, which must
// reject tokens lower than one it has already seen.
func writeStock(ctx context.Context, sku string, token uint64) error { return nil }

// The Locker over a Backend: per-acquisition TTLs (whole seconds), a
// renewal watchdog, and Done when the lease is lost. Waiters are woken by a
// watch on the key's deletion, but the lock is not fair.
func Example() {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://127.0.0.1:2379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	backend, err := etcdlock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer backend.Close()
	locker, err := lock.New(backend, lock.WithTTL(10*time.Second), lock.WithRetry(etcdlock.DefaultRetry))
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := locker.Acquire(ctx, "sku-42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())

	// The critical section stops when the lease is lost, and every write
	// carries the token: the revision of the Put that granted the lease.
	work, stop := lease.Guard(ctx)
	defer stop()
	if err := writeStock(work, "sku-42", lease.Token()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("sold one unit under token", lease.Token())
}

// etcd lease TTLs are whole seconds: anything else is rejected before any
// request is sent.
func ExampleCheckTTL() {
	fmt.Println(etcdlock.CheckTTL(1500*time.Millisecond) != nil)
	fmt.Println(etcdlock.CheckTTL(2 * time.Second))
	// Output:
	// true
	// <nil>
}
