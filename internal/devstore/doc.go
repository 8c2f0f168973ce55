// Package devstore starts the Redis, Redis Cluster, MongoDB and etcd servers
// that the lock tests, the service tests and the load harness share, using
// the best one this machine offers.
//
// Fallback order, best first:
//
//   - Redis (StartRedis): the server at REDIS_ADDR; else a private
//     redis-server from PATH on a free loopback port, without persistence;
//     else miniredis, an in-process stand-in that implements most commands
//     but is not Redis (a warning is logged). A private redis-server can be
//     stopped, started and restarted. StartRedisClock runs one whose clock
//     can be set off (ClockShim), and StartRedisServers several independent
//     ones.
//   - Redis Cluster (StartRedisCluster): the cluster at
//     REDIS_CLUSTER_ADDRS; else three masters and three replicas of
//     redis-server from PATH on free loopback ports, without persistence,
//     joined with redis-cli --cluster create; its nodes can be killed,
//     stopped, started again and failed over. Without redis-server there is
//     no stand-in: the tests skip.
//   - MongoDB (StartMongo): the server at MONGO_URI; else a MongoDB
//     container through testcontainers when a Docker engine answers; else an
//     embedded FerretDB v1, on a private PostgreSQL server when postgres and
//     initdb are installed, else on SQLite (DEVSTORE_FERRETDB chooses),
//     behind a [mongogate] gate; FerretDB can be restarted.
//   - etcd (StartEtcd, StartEtcdCluster): the cluster at
//     ETCD_ENDPOINTS; else an embedded etcd server, one member or a cluster
//     of n, on free loopback ports, with its data in a temporary directory;
//     a member can be killed and started again, and the leader found.
//
// The embedded FerretDB, its PostgreSQL server and etcd members each run in
// a devstored process ([storeproc]), built with go build from this module on first use (a
// minute or more on a cold build cache) or taken from $DEVSTORED. The gate
// runs in the caller's process.
//
// Why the gate: FerretDB v1 executes update and findAndModify as a query
// followed by a separate write by _id, so concurrent conditional updates are
// not atomic, which is exactly what a lock or a stock counter relies on. The
// gate makes writes to the same document wait for each other, so the
// embedded fallback keeps MongoDB's single-document atomicity. Clients must therefore use [Mongo.URI], never
// FerretDB's own address.
//
// Tests take these servers through [devstoretest], which closes them when
// the test ends; this package does not import testing.
//
// External servers are shared: tests using them must pick unique keys,
// databases or collections. Servers started here are private to their caller
// and lose their data at Close.
//
// [mongogate]: github.com/stocklock/stocklock/internal/mongogate
// [storeproc]: github.com/stocklock/stocklock/internal/storeproc
// [devstoretest]: github.com/stocklock/stocklock/internal/devstore/devstoretest
package devstore

import "errors"

// Kinds of server, as reported in Redis.Kind and Mongo.Kind.
const (
	KindExternal       = "external"
	KindRedisServer    = "redis-server"
	KindMiniredis      = "miniredis"
	KindTestcontainers = "testcontainers"
	KindFerretDB       = "ferretdb"
)

// ErrCannotRestart is returned by Restart, Stop and Start for a server that
// devstore does not control as a separate process: an external server,
// miniredis or a container.
var ErrCannotRestart = errors.New("devstore: server cannot be restarted")
