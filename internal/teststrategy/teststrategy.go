// Package teststrategy registers a lock strategy that exists only for
// tests: importing it adds the strategy "test-lock" and its lock service
// "test" to the registry (pkg/strategy) and the lock service's wiring to
// the stock service (services/stock/server). Nothing else names them.
//
// It is the proof that a lock strategy is one registry entry and one
// lock-service entry: loadtest's TestTestOnlyStrategy finds it served by
// replicas, raced by the harness, judged by the verdict and offered by the
// live page. Its lock service is a MongoDB lease (pkg/lock/mongolock) in a
// collection of its own, so its leases exclude across replicas as a new
// lock service's must, and its tokens fence.
package teststrategy

import (
	"context"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/mongolock"
	"github.com/stocklock/stocklock/pkg/strategy"
	"github.com/stocklock/stocklock/services/stock/server"
)

// Name is the test-only strategy; Lock is its lock service.
const (
	Name = "test-lock"
	Lock = "test"
)

// Collection holds the test lock service's leases.
const Collection = "test_locks"

func init() {
	strategy.Register(
		strategy.Info{Name: Name, Safe: true, Lock: Lock, Fenced: true, Doc: "adding-a-strategy.md"},
		&strategy.LockService{Name: Lock, Doc: "adding-a-strategy.md"},
	)
	server.RegisterLockService(Lock, server.LockService{
		Backend: func(ctx context.Context, d server.LockDeps) (lock.Backend, []lock.Option, error) {
			b, err := mongolock.New(d.DB.Collection(Collection), mongolock.WithWriteConcern(d.WriteConcern))
			if err != nil {
				return nil, nil, err
			}
			return b, nil, b.EnsureCollection(ctx)
		},
	})
}
