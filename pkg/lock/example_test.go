package lock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/locallock"
)

// The shape of every critical section: acquire, run the work under a
// context the lease can cancel, pass the fencing token to the write, release.
// The in-process backend stands in for mongolock, redislock or etcdlock here;
// only the constructor changes.
func Example() {
	ctx := context.Background()
	locker, err := lock.New(locallock.New())
	if err != nil {
		panic(err)
	}

	lease, err := locker.Acquire(ctx, "sku:42")
	if err != nil {
		panic(err) // errors.Is(err, lock.ErrNotAcquired) when a retry policy gave up
	}

	work, cancel := lease.Guard(ctx) // cancelled if the lease is lost
	defer cancel()
	fmt.Println("token:", lease.Token(), "work context alive:", work.Err() == nil)

	// Another owner cannot take the key meanwhile.
	_, err = locker.TryAcquire(ctx, "sku:42")
	fmt.Println("second owner:", errors.Is(err, lock.ErrNotAcquired))

	if err := lease.Release(ctx); err != nil {
		panic(err)
	}
	fmt.Println("after release:", context.Cause(work) == lock.ErrReleased)

	next, _ := locker.TryAcquire(ctx, "sku:42")
	fmt.Println("next token is higher:", next.Token() > lease.Token())
	_ = next.Release(ctx)

	// Output:
	// token: 1 work context alive: true
	// second owner: true
	// after release: true
	// next token is higher: true
}
