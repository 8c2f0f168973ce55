// Package strategy is the registry of the stock service's decrement
// strategies and of the lock services they take leases from: the one list
// that every program offering, running or judging a strategy reads (the
// service, the load harness, its verdict, its drills and its live page).
//
// It imports no driver and no other package of this module, so a program
// that only needs to know the strategies (the verdict, the harness's
// command line) links nothing else for it. The strategies themselves are
// built by pkg/inventory/mongostore (mongostore.Build), and the lock services are
// connected by the service (services/stock/server).
package strategy

import (
	"fmt"
	"slices"
)

// Names of the strategies, in teaching order: the two that fail first.
const (
	Unsafe     = "unsafe"
	Local      = "local"
	MongoLease = "mongo-lease"
	RedisLock  = "redis-lock"
	EtcdLock   = "etcd-lock"
	Redlock    = "redlock"
	Optimistic = "optimistic"
	Atomic     = "atomic"
	Batched    = "batched"
	RedisStock = "redis-stock"
	Buckets    = "buckets"
	Queued     = "queued"
)

// Names of the lock services a strategy can take its leases from.
const (
	LockNone    = ""        // no lock
	LockLocal   = "local"   // in-process (pkg/lock/locallock)
	LockMongo   = "mongo"   // MongoDB lease (pkg/lock/mongolock)
	LockRedis   = "redis"   // Redis lock (pkg/lock/redislock)
	LockEtcd    = "etcd"    // etcd lease (pkg/lock/etcdlock)
	LockRedlock = "redlock" // Redlock: a majority of independent redis-servers (pkg/lock/redlock)
)

// Info describes one strategy.
type Info struct {
	Name string
	// Safe reports whether the strategy never sells a unit twice across
	// replicas. An unsafe strategy is offered only in demo mode.
	Safe bool
	// Lock is the lock service the strategy takes a lease from (one of
	// LockServices), LockNone for none.
	Lock string
	// Fenced reports whether the strategy's writes carry its lease's
	// token (when fencing is on): the lock's tokens must be comparable
	// across replicas.
	Fenced bool
	// SplitsStock reports whether the strategy sells from a sku's stock
	// split across documents, which a PUT can split beforehand (the
	// service's "split"), so that no sale pays the split.
	SplitsStock bool
	// Holds reports whether the strategy takes part in holds
	// (docs/holds.md): it creates them under its own discipline, and its
	// sales take the units of expired holds in the same conditional
	// update that sells (mongostore builds it as an inventory.Holder).
	// Every strategy's sales leave held units alone, since they are not in
	// the stock; one that does not take part answers a hold with 501.
	Holds bool
	// Doc is the docs page that teaches it, relative to docs/.
	Doc string
}

// Locks reports whether the strategy takes a lease.
func (in Info) Locks() bool { return in.Lock != LockNone }

// LockService describes a lock service: the service connects it
// (services/stock/server's lock-service table), the harness starts or
// disturbs it.
type LockService struct {
	Name string
	// Doc is the docs page that describes it, relative to docs/.
	Doc string
}

// registry lists every strategy, in teaching order: the two that fail
// first. Adding a strategy is one entry here, and its builder in
// pkg/inventory/mongostore when it takes no lease (docs/adding-a-strategy.md).
var registry = []Info{
	{Name: Unsafe, Doc: "lost-update.md"},
	// Its tokens count from 1 in every process, so they order nothing
	// across replicas: fencing with them would reject one replica's writes
	// forever.
	{Name: Local, Lock: LockLocal, Doc: "lost-update.md"},
	{Name: MongoLease, Safe: true, Lock: LockMongo, Fenced: true, Holds: true, Doc: "mongo-lease.md"},
	{Name: RedisLock, Safe: true, Lock: LockRedis, Fenced: true, Holds: true, Doc: "redis-lock.md"},
	{Name: EtcdLock, Safe: true, Lock: LockEtcd, Fenced: true, Holds: true, Doc: "etcd-lock.md"},
	{Name: Redlock, Safe: true, Lock: LockRedlock, Fenced: true, Holds: true, Doc: "redlock.md"},
	{Name: Optimistic, Safe: true, Doc: "optimistic-vs-atomic.md"},
	{Name: Atomic, Safe: true, Holds: true, Doc: "optimistic-vs-atomic.md"},
	{Name: Batched, Safe: true, Doc: "batched.md"},
	{Name: RedisStock, Safe: true, Doc: "redis-stock.md"},
	{Name: Buckets, Safe: true, SplitsStock: true, Doc: "buckets.md"},
	{Name: Queued, Safe: true, Doc: "queued.md"},
}

// lockServices lists every lock service, in the order of the strategies
// that use them.
var lockServices = []LockService{
	{Name: LockLocal, Doc: "lost-update.md"},
	{Name: LockMongo, Doc: "mongo-lease.md"},
	{Name: LockRedis, Doc: "redis-lock.md"},
	{Name: LockEtcd, Doc: "etcd-lock.md"},
	{Name: LockRedlock, Doc: "redlock.md"},
}

// Register adds a strategy, and its lock service when it brings a new one
// (svc nil otherwise), to the registry. It is for programs that extend the
// service with a strategy of their own (the test-only strategy of
// internal/teststrategy is one): call it from an init function, before
// anything reads the registry. It panics on a name already taken or a lock
// service that does not exist, as a duplicate http.Handle does.
func Register(in Info, svc *LockService) {
	if _, ok := Lookup(in.Name); ok || in.Name == "" {
		panic(fmt.Sprintf("strategy: Register of strategy %q: empty or already registered", in.Name))
	}
	if svc != nil {
		if _, ok := LookupLockService(svc.Name); ok || svc.Name == "" || svc.Name != in.Lock {
			panic(fmt.Sprintf("strategy: Register of lock service %q for %s: empty, already registered or not its lock", svc.Name, in.Name))
		}
		lockServices = append(lockServices, *svc)
	}
	if _, ok := LookupLockService(in.Lock); in.Locks() && !ok {
		panic(fmt.Sprintf("strategy: Register of %s: no lock service %q", in.Name, in.Lock))
	}
	registry = append(registry, in)
}

// All returns every strategy, in teaching order.
func All() []Info { return slices.Clone(registry) }

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
func Names() []string { return NamesOf(func(Info) bool { return true }) }

// NamesOf returns the names of the strategies keep accepts, in teaching
// order.
func NamesOf(keep func(Info) bool) []string {
	var names []string
	for _, in := range registry {
		if keep(in) {
			names = append(names, in.Name)
		}
	}
	return names
}

// Known reports whether name is a strategy.
func Known(name string) bool {
	_, ok := Lookup(name)
	return ok
}

// IsSafe reports whether name is a strategy that never sells a unit twice.
func IsSafe(name string) bool {
	in, ok := Lookup(name)
	return ok && in.Safe
}

// Using returns the strategies that take their leases from lock service
// svc, in teaching order.
func Using(svc string) []string {
	return NamesOf(func(in Info) bool { return in.Locks() && in.Lock == svc })
}

// LockServices returns every lock service.
func LockServices() []LockService { return slices.Clone(lockServices) }

// LookupLockService returns the lock service called name.
func LookupLockService(name string) (LockService, bool) {
	for _, s := range lockServices {
		if s.Name == name {
			return s, true
		}
	}
	return LockService{}, false
}
