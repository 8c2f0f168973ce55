package mongostore

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Deps is what a replica hands the strategies it builds.
type Deps struct {
	Store *Store
	// Lockers holds a Locker per lock service the replica has; a strategy
	// whose lock service is missing cannot be built.
	Lockers map[string]*lock.Locker
	// Fencing turns fencing on for the strategies that are Fenced.
	Fencing bool
	// LockWait, Delay, Stall and CASAttempts are the knobs of
	// LockedConfig and NewOptimistic.
	LockWait    time.Duration
	Delay       time.Duration
	Stall       time.Duration
	CASAttempts int
	// Buckets is the number of documents the buckets strategy splits a
	// sku's stock across (0: DefaultBuckets).
	Buckets  int
	Observer inventory.LockObserver
	Logger   *slog.Logger
	// RedisStock is what the redis-stock strategy needs: its Redis.
	RedisStock RedisStockOptions
}

// builders holds the constructors of the strategies that take no lease,
// each added by its own file. Every strategy with a lock service is a
// Locked under that service's Locker, built the same way (buildLocked).
var builders = map[string]func(Deps) (inventory.Strategy, error){}

// addBuilder registers the constructor of the lock-free strategy name.
func addBuilder(name string, build func(Deps) (inventory.Strategy, error)) bool {
	builders[name] = build
	return true
}

// Build makes the strategy in describes (an entry of the registry in
// pkg/strategy) from what a replica has, checked (see checked): its
// Decrement validates the request and checks the context before anything
// else.
func Build(in strategy.Info, d Deps) (inventory.Strategy, error) {
	build := builders[in.Name]
	if build == nil && in.Locks() {
		build = func(d Deps) (inventory.Strategy, error) { return buildLocked(in, d) }
	}
	if build != nil {
		st, err := build(d)
		if err != nil {
			return nil, err
		}
		return check(st), nil
	}
	return nil, fmt.Errorf("%w: strategy %s takes no lock and has no constructor in pkg/inventory/mongostore", inventory.ErrInvalid, in.Name)
}

// locker returns the Locker of in's lock service, or an error naming it.
func (d Deps) locker(in strategy.Info) (*lock.Locker, error) {
	l := d.Lockers[in.Lock]
	if l == nil {
		return nil, fmt.Errorf("%w: strategy %s needs a %s lock, and none is configured", inventory.ErrInvalid, in.Name, in.Lock)
	}
	return l, nil
}
