package server

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/etcdlock"
	"github.com/stocklock/stocklock/pkg/lock/locallock"
	"github.com/stocklock/stocklock/pkg/lock/mongolock"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
	"github.com/stocklock/stocklock/pkg/lock/redlock"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// LockService is how a replica offers one lock service of the registry
// (strategy.LockServices): whether its configuration gives the service,
// and how to make its lock.Backend from the replica's clients. The table
// of them (lockServices) is the one place the service wires a lock
// service; server flags for its address stay in Config.
type LockService struct {
	// Needs names the settings the service needs, for messages
	// ("--etcd-endpoints / ETCD_ENDPOINTS"); empty when every replica has
	// it.
	Needs string
	// Configured reports whether cfg gives the service; nil means always.
	Configured func(cfg Config) bool
	// Backend makes the service's Backend, and the Locker options it adds
	// to every lock's (TTL, owner prefix, observer), at start-up: ctx
	// bounds the I/O it does then (creating its collection, say). A
	// Backend with a Close method is closed at shutdown, before the
	// replica's clients.
	Backend func(context.Context, LockDeps) (lock.Backend, []lock.Option, error)
}

// LockDeps is what a lock service's Backend is made from.
type LockDeps struct {
	Config       Config
	DB           *mongo.Database // the replica's database
	WriteConcern *writeconcern.WriteConcern
	Redis        redis.UniversalClient   // the replica's Redis (or Redis Cluster)
	Etcd         *clientv3.Client        // nil without --etcd-endpoints
	Redlock      []redis.UniversalClient // one per --redlock-addrs server
}

// lockServices wires every lock service of the registry. The services
// whose keys live in a store that replicas of other databases may share
// (Redis, etcd, the Redlock servers) name them under the database
// (KeyPrefix(cfg.DB)), as mongo-lease's leases live in the database's
// locks collection: replicas of different databases never wait for each
// other.
// TestLockServicesWired checks that none is missing.
var lockServices = map[string]LockService{
	// Each replica has its own in-process lock table, as a separate
	// process would: two replicas in one test process must not share it.
	strategy.LockLocal: {Backend: func(context.Context, LockDeps) (lock.Backend, []lock.Option, error) {
		return locallock.New(), nil, nil
	}},
	strategy.LockMongo: {Backend: func(ctx context.Context, d LockDeps) (lock.Backend, []lock.Option, error) {
		opts := []mongolock.Option{mongolock.WithWriteConcern(d.WriteConcern), mongolock.WithSkew(d.Config.LockSkew)}
		if offset := d.Config.ClockOffset; offset != 0 {
			// A fault drill: this replica's wall clock runs ahead or
			// behind the others'. Only mongo-lease reads it: its expiresAt
			// is a client timestamp compared by clients, while Redis and
			// etcd count a TTL down on their own servers.
			opts = append(opts, mongolock.WithClock(func() time.Time { return time.Now().Add(offset) }))
		}
		b, err := mongolock.New(d.DB.Collection(LocksCollection), opts...)
		if err != nil {
			return nil, nil, err
		}
		// The collection exists before the first lease: else the first
		// grant creates it within its lock wait (see EnsureCollection).
		if err := prepare(ctx, "create the "+LocksCollection+" collection", b.EnsureCollection); err != nil {
			return nil, nil, err
		}
		return b, nil, nil
	}},
	strategy.LockRedis: {Backend: func(_ context.Context, d LockDeps) (lock.Backend, []lock.Option, error) {
		b, err := redislock.New(d.Redis, redislock.WithKeyPrefix(redislock.KeyPrefix(d.Config.DB)))
		return b, nil, err
	}},
	strategy.LockEtcd: {
		Needs:      "--etcd-endpoints / ETCD_ENDPOINTS",
		Configured: func(c Config) bool { return len(c.EtcdEndpoints) > 0 },
		// The TTL is rounded up to whole seconds, etcd's grain; the
		// backend refuses anything else. The token is an etcd revision,
		// shared by the whole cluster and only growing: it orders the
		// grants of every replica, so the writes can be fenced with it
		// like the other leases'.
		Backend: func(_ context.Context, d LockDeps) (lock.Backend, []lock.Option, error) {
			b, err := etcdlock.New(d.Etcd, etcdlock.WithKeyPrefix(etcdlock.KeyPrefix(d.Config.DB)))
			return b, []lock.Option{lock.WithTTL(EtcdLockTTL(d.Config.LockTTL)), lock.WithRetry(etcdlock.DefaultRetry)}, err
		},
	},
	strategy.LockRedlock: {
		Needs:      "--redlock-addrs / REDLOCK_ADDRS",
		Configured: func(c Config) bool { return len(c.RedlockAddrs) > 0 },
		Backend: func(_ context.Context, d LockDeps) (lock.Backend, []lock.Option, error) {
			b, err := redlock.New(d.Redlock, redlock.WithKeyPrefix(redlock.KeyPrefix(d.Config.DB)))
			return b, nil, err
		},
	},
}

// RegisterLockService adds the wiring of a lock service that a program
// extending the service registered with strategy.Register. Call it from
// an init function; it panics on a name that is not in the registry or
// already wired.
func RegisterLockService(name string, svc LockService) {
	if _, ok := strategy.LookupLockService(name); !ok || lockServices[name].Backend != nil || svc.Backend == nil {
		panic(fmt.Sprintf("server: RegisterLockService(%q): not in the registry, already wired, or no Backend", name))
	}
	lockServices[name] = svc
}

// configured reports whether cfg gives lock service name.
func configured(cfg Config, name string) bool {
	svc, ok := lockServices[name]
	return ok && (svc.Configured == nil || svc.Configured(cfg))
}
