package inventory

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/stocklock/stocklock/pkg/lock"
)

// Lock services a strategy can take its leases from.
const (
	LockNone    = ""        // no lock
	LockLocal   = "local"   // in-process (pkg/lock/locallock)
	LockMongo   = "mongo"   // MongoDB lease (pkg/lock/mongolock)
	LockRedis   = "redis"   // Redis lock (pkg/lock/redislock)
	LockEtcd    = "etcd"    // etcd lease (pkg/lock/etcdlock)
	LockRedlock = "redlock" // Redlock: a majority of independent redis-servers (pkg/lock/redlock)
)

// Info describes one strategy for every program that offers, runs or
// judges it: the service, the load harness, its verdicts and its drills.
// The registry (Registry) is the one list of strategies.
type Info struct {
	Name string
	// Safe reports whether the strategy never sells a unit twice across
	// replicas. An unsafe strategy is offered only in demo mode.
	Safe bool
	// Lock is the lock service the strategy takes a lease from, LockNone
	// for none.
	Lock string
	// Fenced reports whether the strategy's writes carry its lease's
	// token (when fencing is on): the lock's tokens must be comparable
	// across replicas.
	Fenced bool
	// Doc is the docs page that teaches it, relative to docs/.
	Doc string
	// Build makes the strategy from what a replica has.
	Build func(Deps) (Strategy, error)
}

// Deps is what a replica hands the strategies it builds.
type Deps struct {
	Store *Store
	// Lockers holds a Locker per lock service the replica has; a strategy
	// whose Lock is missing cannot be built.
	Lockers map[string]*lock.Locker
	// Fencing turns fencing on for the strategies that are Fenced.
	Fencing bool
	// LockWait, Delay, Stall and CASAttempts are the knobs of
	// LockedConfig and NewOptimistic.
	LockWait    time.Duration
	Delay       time.Duration
	Stall       time.Duration
	CASAttempts int
	Observer    LockObserver
	Logger      *slog.Logger
}

// registry lists every strategy, in teaching order: the two that fail
// first. Adding a strategy is its file, with its Info, and one entry here.
var registry = []Info{
	unsafeInfo, localInfo, lockedInfo(NameMongoLease, LockMongo, "mongo-lease.md"),
	lockedInfo(NameRedisLock, LockRedis, "redis-lock.md"), lockedInfo(NameEtcdLock, LockEtcd, "etcd-lock.md"),
	lockedInfo(NameRedlock, LockRedlock, "redlock.md"), optimisticInfo, atomicInfo,
}

// Registry returns every strategy, in teaching order.
func Registry() []Info { return append([]Info(nil), registry...) }

// Lookup returns the strategy called name.
func Lookup(name string) (Info, bool) {
	for _, in := range registry {
		if in.Name == name {
			return in, true
		}
	}
	return Info{}, false
}

// Names returns the names of all strategies, in teaching order.
func Names() []string {
	names := make([]string, len(registry))
	for i, in := range registry {
		names[i] = in.Name
	}
	return names
}

// locker returns the Locker of in's lock service, or an error naming it.
func (d Deps) locker(in Info) (*lock.Locker, error) {
	l := d.Lockers[in.Lock]
	if l == nil {
		return nil, fmt.Errorf("%w: strategy %s needs a %s lock, and none is configured", ErrInvalid, in.Name, in.Lock)
	}
	return l, nil
}
