package mongostore

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

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
	// SoldOut hears the sold-out shortcut's answers; nil: no one.
	SoldOut SoldOutObserver
	Logger  *slog.Logger
	// RedisStock is what the redis-stock strategy needs: its Redis.
	RedisStock RedisStockOptions
	// NATS is the queued strategy's connection to NATS JetStream; nil:
	// queued cannot be built (ErrNoNATS).
	NATS *nats.Conn
	// Queued is the queued strategy's stream and drill options (its Conn,
	// Locker, Prefix and Logger are Build's: NATS, the MongoDB lease
	// service, the database's prefix, Logger).
	Queued QueuedOptions
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

// A Built is a strategy as Build makes it.
type Built struct {
	// Strategy is the strategy as a replica sells through it, wrapped
	// once here in the layers the package doc names ("The strategies"),
	// outermost first: checked, soldOutShortcut, returning (for a
	// strategy that is not a Holder: a Holder returns expired holds in its
	// own sale write) and splitAware. Each says at its definition what a
	// strategy without it would do.
	inventory.Strategy
	// Holder is its part in holds; nil for one that takes none (the
	// registry's Holds).
	Holder inventory.Holder
	// Locked, RedisStock and Queued are the strategy itself when it is
	// one, for what a replica runs beside its sales (leases held,
	// recovery, the consumers of the log: Queued.Run).
	Locked     *Locked
	RedisStock *RedisStock
	Queued     *Queued
}

// Build makes the strategy in describes (an entry of the registry in
// pkg/strategy) from what a replica has (see Built).
func Build(in strategy.Info, d Deps) (Built, error) {
	build := builders[in.Name]
	if build == nil && in.Locks() {
		build = func(d Deps) (inventory.Strategy, error) { return buildLocked(in, d) }
	}
	if build == nil {
		return Built{}, fmt.Errorf("%w: strategy %s takes no lock and has no constructor in pkg/inventory/mongostore", inventory.ErrInvalid, in.Name)
	}
	st, err := build(d)
	if err != nil {
		return Built{}, err
	}
	b := Built{}
	b.Locked, _ = st.(*Locked)
	b.RedisStock, _ = st.(*RedisStock)
	b.Queued, _ = st.(*Queued)
	if holder, ok := st.(inventory.Holder); ok && in.Holds {
		b.Holder = holder
	}
	wrapped, err := newSplitAware(st, d.Store, d.Buckets)
	if err != nil {
		return Built{}, err
	}
	if b.Holder == nil {
		wrapped = returning{Strategy: wrapped, store: d.Store}
	}
	b.Strategy = checked{newSoldOutShortcut(wrapped, d.Store, d.SoldOut)}
	return b, nil
}

// locker returns the Locker of in's lock service, or an error naming it.
func (d Deps) locker(in strategy.Info) (*lock.Locker, error) {
	l := d.Lockers[in.Lock]
	if l == nil {
		return nil, fmt.Errorf("%w: strategy %s needs a %s lock, and none is configured", inventory.ErrInvalid, in.Name, in.Lock)
	}
	return l, nil
}
