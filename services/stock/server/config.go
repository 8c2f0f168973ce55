package server

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory/mongostore"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/mongolock"

	"go.mongodb.org/mongo-driver/v2/event"
)

// Config is a replica's configuration. ParseConfig fills it from flags and
// environment variables; tests may build one directly and call Validate.
type Config struct {
	Addr            string        // listen address, host:port
	InternalAddr    string        // listen address of /healthz, /readyz and /metrics; empty: Addr serves them
	AdminToken      string        // bearer token of stock changes (PUT); empty: PUT is not served
	Demo            bool          // offer the broken strategies and accept the drill settings
	MongoURI        string        // mongodb:// or mongodb+srv:// URI
	DB              string        // database of items, orders and Mongo locks
	RedisAddr       string        // host:port of the Redis that holds the redis-lock leases
	RedisPassword   string        // Redis AUTH password; empty: none
	RedisCluster    []string      // host:port of nodes of a Redis Cluster that holds the redis-lock leases, instead of RedisAddr
	EtcdEndpoints   []string      // etcd client URLs of the etcd-lock strategy; none: etcd-lock is unavailable
	RedlockAddrs    []string      // host:port of the independent redis-servers of the redlock strategy; none: redlock is unavailable
	NATSURL         string        // NATS server with JetStream of the queued strategy; empty: queued is unavailable
	QueuedStorage   string        // the queued stream's storage: "file" or "memory"
	QueuedReplicas  int           // servers that keep the queued stream; 0: 3 when NATSURL names three servers or more, else 1
	QueuedDedup     time.Duration // the queued stream's duplicate window; 0 (drill): publishes carry no message id
	QueuedDelay     time.Duration // drill: the queued consumers hold each batch this long before applying it
	Replica         string        // this replica's name in responses, orders and lock owners
	LockTTL         time.Duration // lease time to live (renewed at a third of it)
	LockWait        time.Duration // how long a decrement waits for its lock
	LockSkew        time.Duration // mongo-lease: how long past its expiry a lease must be before another owner takes it
	ClockOffset     time.Duration // fault drill: added to the clock mongo-lease stamps and judges expiry with
	Strategy        string        // strategy of a decrement that names none
	RMWDelay        time.Duration // teaching knob: sleep inside the read-modify-write window
	WriteStall      time.Duration // fault drill: uninterruptible sleep of the lock strategies just before the stock write
	WriteConcern    string        // "majority" or a number of nodes
	MaxQty          int64         // largest qty one decrement may ask for
	Fencing         bool          // fence the reads and writes of the strategies whose registry entry is Fenced
	CASAttempts     int           // compare-and-set attempts of the optimistic strategy
	RedisStockAck   string        // redis-stock acknowledges a sale after "mongo" (the ledger) or "redis" (demo: the Lua take alone)
	RedisStockFlush time.Duration // redis-stock's write-behind interval with RedisStockAck "redis"
	RedisStockWait  time.Duration // redis-stock: WAIT 1 this long after each take, 0 for no WAIT
	Buckets         int           // documents the buckets strategy splits a sku's stock across
	RequestTimeout  time.Duration // bound on a request's work, lock wait included
	ShutdownTimeout time.Duration // how long shutdown waits for in-flight reads; decrements and PUTs are always waited for (see WriteBudget)
	RecoveryEvery   time.Duration // how often the replica records other replicas' pending orders and settles idempotency keys
	RecoveryGrace   time.Duration // how old a pending order must be before recovery records it
	DeadAfter       time.Duration // how long another replica's heartbeat must stand still before its keyed requests in flight are given up
	KeyRetention    time.Duration // how long an Idempotency-Key is remembered
	SalesLimit      int           // sale requests working at once (the sales admission; docs/overload.md)
	SalesQueue      int           // sale requests waiting for a slot at most
	SalesQueueWait  time.Duration // longest a sale request waits for a slot
	MongoPool       int           // MongoDB connections of the sales' client
	ControlPool     int           // MongoDB connections of the admin routes' and the readiness probe's client
	LogFormat       string        // json or text
	LogLevel        string        // debug, info, warn or error

	// afterTake is mongostore.StoreOptions.AfterTake, for tests that stop a
	// request between its stock write and its ledger write.
	afterTake func(inventory.Order)
	// beforeKeysPass, if set, runs before each pass that settles
	// idempotency keys, for tests that hold a pass.
	beforeKeysPass func()
	// monitor, if set, gives each MongoDB client a command monitor, by
	// the client's role: "sales", "control" or "background".
	monitor func(role string) *event.CommandMonitor
	// wrapHandler, if set, wraps the API's and the internal listener's
	// handlers: the tests check every request and answer against the
	// OpenAPI document with it.
	wrapHandler func(http.Handler) http.Handler
}

// DefaultConfig returns the defaults that flags and environment override.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	if !replicaPattern.MatchString(host) {
		host = "stock"
	}
	return Config{
		Addr:            ":8080",
		DB:              "stocklock",
		Replica:         host,
		LockTTL:         lock.DefaultTTL,
		LockWait:        mongostore.DefaultLockWait,
		LockSkew:        mongolock.DefaultSkew,
		Strategy:        strategy.MongoLease,
		WriteConcern:    "majority",
		MaxQty:          100,
		Fencing:         true,
		CASAttempts:     mongostore.DefaultCASAttempts,
		RedisStockAck:   RedisStockAckMongo,
		RedisStockFlush: mongostore.DefaultRedisStockFlush,
		Buckets:         mongostore.DefaultBuckets,
		RequestTimeout:  15 * time.Second,
		ShutdownTimeout: 10 * time.Second,
		RecoveryEvery:   5 * time.Second,
		RecoveryGrace:   5 * time.Second,
		DeadAfter:       mongostore.DefaultDeadAfter,
		KeyRetention:    mongostore.DefaultKeyRetention,
		SalesLimit:      DefaultSalesLimit,
		SalesQueue:      DefaultSalesQueue,
		SalesQueueWait:  DefaultSalesQueueWait,
		MongoPool:       DefaultMongoPool,
		ControlPool:     DefaultControlPool,
		LogFormat:       "json",
		LogLevel:        "info",
		QueuedStorage:   QueuedStorageFile,
		QueuedDedup:     mongostore.DefaultQueuedDedup,
	}
}

// setting is one configuration value: its flag, its environment variable
// and where it goes.
type setting struct {
	flag, env, usage string
	value            flag.Value
}

// settings lists every setting of c, in the order --help shows them.
func (c *Config) settings() []setting {
	return []setting{
		{"addr", "STOCK_ADDR", "listen address, host:port", (*stringValue)(&c.Addr)},
		{"internal-addr", "INTERNAL_ADDR", "listen address of /healthz, /readyz and /metrics, for probes and Prometheus only; empty: --addr serves them", (*stringValue)(&c.InternalAddr)},
		{"admin-token", "ADMIN_TOKEN", "bearer token that stock changes (PUT /v1/items/{sku}) must carry, at least 16 characters; empty: stock changes are not served (404)", (*stringValue)(&c.AdminToken)},
		{"demo", "DEMO", "demonstration mode: offer the unsafe and local strategies and accept the teaching and drill settings (--rmw-delay, --write-stall, --clock-offset, --fencing=false); never in production", (*boolValue)(&c.Demo)},
		{"mongo-uri", "MONGO_URI", "MongoDB URI, mongodb://host:port/ (required)", (*stringValue)(&c.MongoURI)},
		{"db", "MONGO_DB", "MongoDB database of items, orders and locks", (*stringValue)(&c.DB)},
		{"redis-addr", "REDIS_ADDR", "Redis host:port for the redis-lock strategy (required)", (*stringValue)(&c.RedisAddr)},
		{"redis-cluster-addrs", "REDIS_CLUSTER_ADDRS", "comma-separated host:port of nodes of a Redis Cluster for the redis-lock strategy, instead of --redis-addr (exactly one of the two is required)", (*listValue)(&c.RedisCluster)},
		{"redis-password", "REDIS_PASSWORD", "Redis password (AUTH); prefer the variable to the flag, which other users can see in the process list", (*stringValue)(&c.RedisPassword)},
		{"etcd-endpoints", "ETCD_ENDPOINTS", "comma-separated etcd client URLs (http://host:2379,...) for the etcd-lock strategy; empty: etcd-lock answers 503 strategy_unavailable", (*listValue)(&c.EtcdEndpoints)},
		{"nats-url", "NATS_URL", "URL of a NATS server with JetStream for the queued strategy (nats://127.0.0.1:4222; several comma-separated for a cluster); empty: queued answers 503 strategy_unavailable", (*stringValue)(&c.NATSURL)},
		{"queued-storage", "QUEUED_STORAGE", `where the queued strategy's stream keeps its sales: "file" (survives a broker restart) or "memory" (a restart loses the sales not yet applied, whose buyers are told the outcome is unknown); a stream of the other storage is another stream, so every replica must use the same`, (*stringValue)(&c.QueuedStorage)},
		{"queued-replicas", "QUEUED_REPLICAS", "servers of a JetStream cluster that keep the queued stream, 1 to 5 (3 survives one server's loss); 0: 3 when --nats-url names three servers or more, else 1", (*intValue)(&c.QueuedReplicas)},
		{"queued-dedup", "QUEUED_DEDUP", "the queued stream's duplicate window: a publish sent again after a lost acknowledgement under the same message id within it is dropped; 0 turns de-duplication off (publishes carry no message id; demo only: a publish sent again may sell twice)", (*durationValue)(&c.QueuedDedup)},
		{"queued-apply-delay", "QUEUED_APPLY_DELAY", "fault drill: the queued consumers hold each batch this long before applying it (a slow consumer: buyers wait, then are told the outcome is unknown)", (*durationValue)(&c.QueuedDelay)},
		{"redlock-addrs", "REDLOCK_ADDRS", "comma-separated host:port of the independent redis-servers (no replication between them, an odd number of at least 3, for example 5) of the redlock strategy; empty: redlock answers 503 strategy_unavailable", (*listValue)(&c.RedlockAddrs)},
		{"replica", "REPLICA_ID", "this replica's name in responses, orders and lock owners; one process per name: a replica refuses to start while a heartbeat of its name still advances", (*stringValue)(&c.Replica)},
		{"lock-ttl", "LOCK_TTL", "lock lease time to live; renewed every third of it (etcd-lock rounds it up to whole seconds: etcd leases are)", (*durationValue)(&c.LockTTL)},
		{"lock-wait", "LOCK_WAIT", "how long a decrement waits for its lock before 503 lock_unavailable", (*durationValue)(&c.LockWait)},
		{"lock-skew", "LOCK_SKEW", "mongo-lease: clock-skew allowance, how far past its expiresAt (by this replica's clock) a lease must be before this replica takes it over; must cover the largest clock difference between replicas", (*durationValue)(&c.LockSkew)},
		{"clock-offset", "CLOCK_OFFSET", "fault drill: shift this replica's lease clock by this much (for example 2s or -2s); mongo-lease stamps and judges expiry with it, the Redis and etcd TTLs run on their servers' clocks and ignore it", (*durationValue)(&c.ClockOffset)},
		{"strategy", "STRATEGY", "strategy of a decrement that names none: " + strings.Join(strategy.Names(), ", "), (*stringValue)(&c.Strategy)},
		{"rmw-delay", "RMW_DELAY", "teaching knob: sleep between read and write, to widen races", (*durationValue)(&c.RMWDelay)},
		{"write-stall", "WRITE_STALL", "fault drill: lock strategies sleep this long after their last lease check, just before the stock write, deaf to the lease (a stand-in for a GC pause); only the fence can stop the write that follows", (*durationValue)(&c.WriteStall)},
		{"write-concern", "WRITE_CONCERN", `write concern of stock and order writes: "majority" or a node count`, (*stringValue)(&c.WriteConcern)},
		{"max-qty", "MAX_QTY", "largest qty one decrement may ask for", (*int64Value)(&c.MaxQty)},
		{"fencing", "FENCING", "fence the reads and writes of the lock strategies (" + strings.Join(strategy.NamesOf(func(in strategy.Info) bool { return in.Fenced }), ", ") + "; false only to demonstrate)", (*boolValue)(&c.Fencing)},
		{"cas-attempts", "CAS_ATTEMPTS", "compare-and-set attempts of the optimistic strategy", (*intValue)(&c.CASAttempts)},
		{"redis-stock-ack", "REDIS_STOCK_ACK", `when redis-stock answers a sale: "mongo", once it is in MongoDB (the item and the ledger), or "redis", as soon as the Lua script took it in Redis, written to MongoDB behind (demo only: a Redis restart sells units twice)`, (*stringValue)(&c.RedisStockAck)},
		{"redis-stock-flush", "REDIS_STOCK_FLUSH", `redis-stock with --redis-stock-ack=redis: how often the sales acknowledged from Redis are written to MongoDB`, (*durationValue)(&c.RedisStockFlush)},
		{"redis-stock-wait", "REDIS_STOCK_WAIT", `redis-stock: after each Lua take, WAIT 1 for this long, and give the take back and refuse the sale (503, nothing sold) unless a Redis replica has it; 0 (the default) does not wait. It keeps a failover from forgetting sales acknowledged from Redis (--redis-stock-ack=redis); it needs a Redis with a replica, and does not make Redis a CP store (docs/redis-stock.md)`, (*durationValue)(&c.RedisStockWait)},
		{"buckets", "BUCKETS", "documents the buckets strategy splits a sku's stock across when it first splits it (an item keeps its count)", (*intValue)(&c.Buckets)},
		{"request-timeout", "REQUEST_TIMEOUT", "bound on one request's work, lock wait included", (*durationValue)(&c.RequestTimeout)},
		{"shutdown-timeout", "SHUTDOWN_TIMEOUT", "how long shutdown waits for in-flight reads; in-flight decrements and PUTs are always waited for, their stock and ledger writes included (at most --request-timeout plus five write timeouts, 165s by default; in practice milliseconds), so a supervisor's stop grace period must cover that", (*durationValue)(&c.ShutdownTimeout)},
		{"recovery-interval", "RECOVERY_INTERVAL", "how often this replica records the pending orders of sales whose replica died between the stock write and the ledger write, and settles idempotency keys", (*durationValue)(&c.RecoveryEvery)},
		{"recovery-grace", "RECOVERY_GRACE", "how old a pending order must be before recovery records it (younger ones are left to the replica that sold them)", (*durationValue)(&c.RecoveryGrace)},
		{"heartbeat-timeout", "HEARTBEAT_TIMEOUT", "how long another replica's heartbeat (sent every fifth of this) must stand still before this replica takes it for dead and gives up its Idempotency-Key requests in flight, so that their retries can sell; giving up is fenced, so a replica that was only paused cannot sell them too; every replica must use the same, and one refuses to start beside live replicas that use another", (*durationValue)(&c.DeadAfter)},
		{"idempotency-retention", "IDEMPOTENCY_RETENTION", "how long an Idempotency-Key is remembered, at least 24h", (*durationValue)(&c.KeyRetention)},
		{"sales-concurrency", "SALES_CONCURRENCY", "sale requests (decrements, holds' create, read, confirm, release) working at once; more wait in the queue, the rest are answered 503 overloaded before any store or lock work (docs/overload.md); at most --mongo-pool", (*intValue)(&c.SalesLimit)},
		{"sales-queue", "SALES_QUEUE", "sale requests that may wait for a working slot at most (fewer when the slots could not serve them in time, by how long they have been held lately); 0: none wait", (*intValue)(&c.SalesQueue)},
		{"sales-queue-wait", "SALES_QUEUE_WAIT", "longest a sale request waits for a working slot before 503 overloaded (5 ms once the queue has not emptied for 100 ms: CoDel)", (*durationValue)(&c.SalesQueueWait)},
		{"mongo-pool", "MONGO_POOL", "MongoDB connections of the sales' client (its maxPoolSize)", (*intValue)(&c.MongoPool)},
		{"control-pool", "CONTROL_POOL", "MongoDB connections of the client of the admin routes (GET, PUT, restock of an item, its orders) and /readyz; heartbeats and recovery have a client of their own, of " + strconv.Itoa(backgroundPool), (*intValue)(&c.ControlPool)},
		{"log-format", "LOG_FORMAT", "log format: json or text", (*stringValue)(&c.LogFormat)},
		{"log-level", "LOG_LEVEL", "log level: debug, info, warn or error", (*stringValue)(&c.LogLevel)},
	}
}

// ParseConfig reads the configuration from args (without the program name)
// and, for every flag not given, from its environment variable through
// getenv; then validates it. Every problem found is reported, each with what
// to set. With -h or --help it returns an error wrapping flag.ErrHelp; print
// Usage then.
func ParseConfig(args []string, getenv func(string) string) (Config, error) {
	c := DefaultConfig()
	var errs []error
	for _, s := range c.settings() {
		if v := getenv(s.env); v != "" {
			if err := s.value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", s.env, v, err))
			}
		}
	}
	fs := newFlagSet(&c)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, fmt.Errorf("%w (run with --help for the list of flags)", err)
	}
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q: every setting is a --flag", fs.Args()))
	}
	errs = append(errs, c.problems()...)
	if len(errs) > 0 {
		return Config{}, configError(errs)
	}
	return c, nil
}

// configError reports every problem, one per line.
func configError(errs []error) error {
	var b strings.Builder
	b.WriteString("invalid configuration:")
	for _, err := range errs {
		b.WriteString("\n  ")
		b.WriteString(err.Error())
	}
	return errors.New(b.String())
}

func newFlagSet(c *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("stock", flag.ContinueOnError)
	for _, s := range c.settings() {
		fs.Var(s.value, s.flag, s.usage+" (env "+s.env+")")
	}
	return fs
}

// Usage returns the --help text: every flag, its environment variable and
// its default.
func Usage() string {
	var b bytes.Buffer
	b.WriteString("Usage: stock [flags]\n\nA stock service replica. Every flag falls back to the environment variable named with it.\n\n")
	c := DefaultConfig()
	fs := newFlagSet(&c)
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return b.String()
}

var (
	replicaPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	// dbPattern is what both MongoDB and FerretDB accept as a database name.
	dbPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)
)

// Validate checks every setting and reports all problems at once, each
// with the flag and variable to fix.
func (c Config) Validate() error {
	if errs := c.problems(); len(errs) > 0 {
		return configError(errs)
	}
	return nil
}

func (c Config) problems() []error {
	var errs []error
	bad := func(flagName, env, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s / %s: %s", flagName, env, fmt.Sprintf(format, args...)))
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		bad("addr", "STOCK_ADDR", "%q is not host:port (for example :8080 or 127.0.0.1:8080)", c.Addr)
	}
	if _, _, err := net.SplitHostPort(c.InternalAddr); c.InternalAddr != "" && err != nil {
		bad("internal-addr", "INTERNAL_ADDR", "%q is not host:port (for example :9090), or leave it empty", c.InternalAddr)
	}
	if c.AdminToken != "" && (len(c.AdminToken) < minAdminToken || strings.ContainsAny(c.AdminToken, " \t\r\n")) {
		bad("admin-token", "ADMIN_TOKEN", "want at least %d characters and no spaces (for example the output of openssl rand -hex 24)", minAdminToken)
	}
	c.checkDemo(bad)
	switch {
	case c.MongoURI == "":
		bad("mongo-uri", "MONGO_URI", "not set: give the MongoDB to use, for example mongodb://127.0.0.1:27017/")
	case !strings.HasPrefix(c.MongoURI, "mongodb://") && !strings.HasPrefix(c.MongoURI, "mongodb+srv://"):
		bad("mongo-uri", "MONGO_URI", "must start with mongodb:// or mongodb+srv://")
	}
	if !dbPattern.MatchString(c.DB) {
		bad("db", "MONGO_DB", "%q: want 1 to 63 of [A-Za-z0-9_-]", c.DB)
	}
	// One Redis or one cluster, never both: replicas that locked on two
	// different ones would exclude nobody.
	switch {
	case len(c.RedisCluster) > 0 && c.RedisAddr != "":
		bad("redis-cluster-addrs", "REDIS_CLUSTER_ADDRS", "set together with --redis-addr / REDIS_ADDR: give one of the two")
	case len(c.RedisCluster) > 0:
		for _, a := range c.RedisCluster {
			if _, _, err := net.SplitHostPort(a); err != nil {
				bad("redis-cluster-addrs", "REDIS_CLUSTER_ADDRS", "%q is not host:port", a)
			}
		}
	case c.RedisAddr == "":
		bad("redis-addr", "REDIS_ADDR", "not set: give the Redis to use, for example 127.0.0.1:6379, or a Redis Cluster with --redis-cluster-addrs / REDIS_CLUSTER_ADDRS")
	default:
		if _, _, err := net.SplitHostPort(c.RedisAddr); err != nil {
			bad("redis-addr", "REDIS_ADDR", "%q is not host:port", c.RedisAddr)
		}
	}
	for _, ep := range c.EtcdEndpoints {
		if err := checkEtcdEndpoint(ep); err != nil {
			bad("etcd-endpoints", "ETCD_ENDPOINTS", "%q: %v", ep, err)
		}
	}
	c.checkRedlock(bad)
	for u := range strings.SplitSeq(c.NATSURL, ",") {
		if c.NATSURL == "" {
			break
		}
		if p, err := url.Parse(strings.TrimSpace(u)); err != nil || (p.Scheme != "nats" && p.Scheme != "tls") || p.Host == "" {
			bad("nats-url", "NATS_URL", "%q: want nats://host:port or tls://host:port", u)
		}
	}
	if c.QueuedStorage != QueuedStorageFile && c.QueuedStorage != QueuedStorageMemory {
		bad("queued-storage", "QUEUED_STORAGE", "%q: want %q or %q", c.QueuedStorage, QueuedStorageFile, QueuedStorageMemory)
	}
	if c.QueuedReplicas < 0 || c.QueuedReplicas > maxQueuedReplicas {
		bad("queued-replicas", "QUEUED_REPLICAS", "%d: want 1 to %d, or 0 for 3 on a cluster URL and 1 otherwise", c.QueuedReplicas, maxQueuedReplicas)
	}
	if c.QueuedDedup != 0 && (c.QueuedDedup < time.Second || c.QueuedDedup > time.Hour) {
		bad("queued-dedup", "QUEUED_DEDUP", "%v: want 1s up to 1h (default %v), or 0 for none", c.QueuedDedup, mongostore.DefaultQueuedDedup)
	}
	if c.QueuedDelay < 0 || c.QueuedDelay > time.Minute {
		bad("queued-apply-delay", "QUEUED_APPLY_DELAY", "%v: want 0 (the default) up to 1m", c.QueuedDelay)
	}
	if !replicaPattern.MatchString(c.Replica) {
		bad("replica", "REPLICA_ID", "%q: want 1 to 64 of [A-Za-z0-9._-]", c.Replica)
	}
	if c.LockTTL < lock.MinTTL {
		bad("lock-ttl", "LOCK_TTL", "%v is under the minimum of %v", c.LockTTL, lock.MinTTL)
	}
	if c.LockWait <= 0 {
		bad("lock-wait", "LOCK_WAIT", "%v: must be positive, for example 2s", c.LockWait)
	}
	if c.LockSkew < 0 || c.LockSkew > time.Hour {
		bad("lock-skew", "LOCK_SKEW", "%v: want 0 up to 1h (default %v)", c.LockSkew, mongolock.DefaultSkew)
	}
	if c.ClockOffset < -time.Hour || c.ClockOffset > time.Hour {
		bad("clock-offset", "CLOCK_OFFSET", "%v: want between -1h and 1h (0, the default, leaves the clock alone)", c.ClockOffset)
	}
	if in, ok := strategy.Lookup(c.Strategy); !ok {
		bad("strategy", "STRATEGY", "%q is not one of %s", c.Strategy, strings.Join(strategy.Names(), ", "))
	} else if in.Locks() && !configured(c, in.Lock) {
		bad("strategy", "STRATEGY", "%s needs its %s lock service: set %s, or pick another strategy", c.Strategy, in.Lock, lockServices[in.Lock].Needs)
	} else if in.Name == strategy.Queued && c.NATSURL == "" {
		bad("strategy", "STRATEGY", "%s needs NATS: set %s, or pick another strategy", c.Strategy, natsNeeds)
	}
	if c.RMWDelay < 0 || c.RMWDelay > time.Minute {
		bad("rmw-delay", "RMW_DELAY", "%v: want 0 (the default) up to 1m", c.RMWDelay)
	}
	if c.WriteStall < 0 || c.WriteStall > time.Minute {
		bad("write-stall", "WRITE_STALL", "%v: want 0 (the default) up to 1m", c.WriteStall)
	}
	if _, err := mongostore.ParseWriteConcern(c.WriteConcern); err != nil {
		bad("write-concern", "WRITE_CONCERN", `%q: want "majority" or a number of nodes >= 1`, c.WriteConcern)
	}
	if c.MaxQty < 1 {
		bad("max-qty", "MAX_QTY", "%d: must be at least 1", c.MaxQty)
	}
	switch c.RedisStockAck {
	case RedisStockAckMongo, RedisStockAckRedis:
	default:
		bad("redis-stock-ack", "REDIS_STOCK_ACK", "%q: want %q or %q", c.RedisStockAck, RedisStockAckMongo, RedisStockAckRedis)
	}
	if c.RedisStockFlush <= 0 {
		bad("redis-stock-flush", "REDIS_STOCK_FLUSH", "%v: must be positive", c.RedisStockFlush)
	}
	if c.RedisStockWait < 0 || c.RedisStockWait > MaxRedisStockWait {
		// Above it, the Redis client's read timeout would end the wait.
		bad("redis-stock-wait", "REDIS_STOCK_WAIT", "%v: want 0 (no WAIT, the default) up to %v", c.RedisStockWait, MaxRedisStockWait)
	}
	if c.CASAttempts < 1 {
		bad("cas-attempts", "CAS_ATTEMPTS", "%d: must be at least 1", c.CASAttempts)
	}
	if c.Buckets < 1 || c.Buckets > mongostore.MaxBuckets {
		bad("buckets", "BUCKETS", "%d: want 1 to %d", c.Buckets, mongostore.MaxBuckets)
	}
	if c.RequestTimeout <= c.LockWait {
		bad("request-timeout", "REQUEST_TIMEOUT", "%v must be longer than the lock wait (%v), or every lock wait ends as a timeout", c.RequestTimeout, c.LockWait)
	}
	if c.ShutdownTimeout <= 0 {
		bad("shutdown-timeout", "SHUTDOWN_TIMEOUT", "%v: must be positive, for example 10s", c.ShutdownTimeout)
	}
	if c.RecoveryEvery <= 0 || c.RecoveryEvery > time.Hour {
		bad("recovery-interval", "RECOVERY_INTERVAL", "%v: want more than 0 and at most 1h (default 5s)", c.RecoveryEvery)
	}
	if c.RecoveryGrace < 0 || c.RecoveryGrace > time.Hour {
		bad("recovery-grace", "RECOVERY_GRACE", "%v: want 0 up to 1h (default 5s)", c.RecoveryGrace)
	}
	if c.DeadAfter < 500*time.Millisecond || c.DeadAfter > time.Hour {
		bad("heartbeat-timeout", "HEARTBEAT_TIMEOUT", "%v: want 500ms up to 1h (default %v)", c.DeadAfter, mongostore.DefaultDeadAfter)
	}
	if c.KeyRetention < mongostore.DefaultKeyRetention {
		bad("idempotency-retention", "IDEMPOTENCY_RETENTION", "%v: keys must be kept at least %v, so that a client's retries within a day are recognised", c.KeyRetention, mongostore.DefaultKeyRetention)
	}
	if c.MongoPool < 1 || c.MongoPool > maxPool {
		bad("mongo-pool", "MONGO_POOL", "%d: want 1 to %d (default %d)", c.MongoPool, maxPool, DefaultMongoPool)
	}
	if c.ControlPool < 1 || c.ControlPool > maxPool {
		bad("control-pool", "CONTROL_POOL", "%d: want 1 to %d (default %d)", c.ControlPool, maxPool, DefaultControlPool)
	}
	if c.SalesLimit < 1 || c.SalesLimit > c.MongoPool {
		bad("sales-concurrency", "SALES_CONCURRENCY", "%d: want 1 up to --mongo-pool / MONGO_POOL (%d): each working sale holds a connection (default %d)", c.SalesLimit, c.MongoPool, DefaultSalesLimit)
	}
	if c.SalesQueue < 0 || c.SalesQueue > maxSalesQueue {
		bad("sales-queue", "SALES_QUEUE", "%d: want 0 to %d (default %d)", c.SalesQueue, maxSalesQueue, DefaultSalesQueue)
	}
	if c.SalesQueueWait < 10*time.Millisecond || c.SalesQueueWait >= c.RequestTimeout {
		bad("sales-queue-wait", "SALES_QUEUE_WAIT", "%v: want 10ms up to less than --request-timeout (%v); a buyer is long gone after a few seconds (default %v)", c.SalesQueueWait, c.RequestTimeout, DefaultSalesQueueWait)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		bad("log-format", "LOG_FORMAT", "%q: want json or text", c.LogFormat)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("log-level", "LOG_LEVEL", "%q: want debug, info, warn or error", c.LogLevel)
	}
	return errs
}

// The defaults of the sales admission and of the MongoDB clients
// (docs/overload.md says why these).
const (
	// DefaultMongoPool is the MongoDB driver's own default maxPoolSize.
	DefaultMongoPool = 100
	// DefaultSalesLimit is the sales' pool over the most connections one
	// sale holds at once: a buckets sale reads its default 8 documents in
	// parallel (100/8). Every other strategy holds one at a time, so the
	// pool always has room for their ledger writes and lease renewals. Two
	// replicas (24 at once) also stay under the embedded store's gate (30).
	DefaultSalesLimit = DefaultMongoPool / 8
	// DefaultSalesQueue is about what a replica drains within one
	// DefaultSalesQueueWait at its measured knee (~105 sales/s a replica
	// on one hot sku): a longer queue would only hold requests to shed.
	DefaultSalesQueue = 50
	// DefaultSalesQueueWait is a quarter of the 2 s a buyer waits, leaving
	// the rest for the sale itself.
	DefaultSalesQueueWait = 500 * time.Millisecond
	// DefaultControlPool serves the admin routes and /readyz.
	DefaultControlPool = 8
	// backgroundPool serves the heartbeats and the three recovery loops,
	// each one operation at a time.
	backgroundPool = 4

	maxPool       = 1000
	maxSalesQueue = 100000
)

// minAdminToken is the shortest admin token accepted.
const minAdminToken = 16

// demoOnly reports whether strategy is one only demo mode offers: one that
// oversells across replicas.
func demoOnly(name string) bool {
	in, ok := strategy.Lookup(name)
	return ok && !in.Safe
}

// checkDemo refuses the settings that only a demonstration wants, unless
// --demo is on: a broken default strategy, a widened race window, the
// drill knobs, and fencing off.
func (c Config) checkDemo(bad func(flagName, env, format string, args ...any)) {
	if c.Demo {
		return
	}
	const fix = "; that is for demonstrations only: add --demo / DEMO=true to allow it"
	if demoOnly(c.Strategy) {
		bad("strategy", "STRATEGY", "%s oversells across replicas%s", c.Strategy, fix)
	}
	if c.RMWDelay != 0 {
		bad("rmw-delay", "RMW_DELAY", "%v widens the race window%s", c.RMWDelay, fix)
	}
	if c.WriteStall != 0 {
		bad("write-stall", "WRITE_STALL", "%v stalls every locked write%s", c.WriteStall, fix)
	}
	if c.ClockOffset != 0 {
		bad("clock-offset", "CLOCK_OFFSET", "%v shifts the lease clock%s", c.ClockOffset, fix)
	}
	if !c.Fencing {
		bad("fencing", "FENCING", "false lets a stalled lock holder overwrite a newer one%s", fix)
	}
	if c.RedisStockAck == RedisStockAckRedis {
		bad("redis-stock-ack", "REDIS_STOCK_ACK", "%q answers sales that a Redis restart forgets%s", c.RedisStockAck, fix)
	}
	if c.QueuedDedup == 0 {
		bad("queued-dedup", "QUEUED_DEDUP", "0 lets a publish sent again sell twice%s", fix)
	}
	if c.QueuedDelay != 0 {
		bad("queued-apply-delay", "QUEUED_APPLY_DELAY", "%v slows every queued sale%s", c.QueuedDelay, fix)
	}
}

// MaxRedisStockWait bounds Config.RedisStockWait: below the Redis
// client's read timeout (3s), which would otherwise end the WAIT first.
const MaxRedisStockWait = 2 * time.Second

// The values of Config.RedisStockAck.
const (
	RedisStockAckMongo = "mongo" // after the item write and the ledger: safe
	RedisStockAckRedis = "redis" // after the Lua take alone: demo
)

// The values of Config.QueuedStorage.
const (
	QueuedStorageFile   = "file"
	QueuedStorageMemory = "memory"
)

// maxQueuedReplicas is JetStream's largest replication.
const maxQueuedReplicas = 5

// QueuedOptions are the queued strategy's stream and drill options (the
// rest of mongostore.QueuedOptions is Build's).
func (c Config) QueuedOptions() mongostore.QueuedOptions {
	replicas := c.QueuedReplicas
	if replicas == 0 {
		replicas = 1
		if strings.Count(c.NATSURL, ",") >= 2 {
			replicas = 3
		}
	}
	return mongostore.QueuedOptions{
		Memory: c.QueuedStorage == QueuedStorageMemory, Replicas: replicas,
		Dedup: c.QueuedDedup, NoDedup: c.QueuedDedup == 0, ApplyDelay: c.QueuedDelay,
	}
}

// natsNeeds is what the queued strategy needs configured.
const natsNeeds = "--nats-url / NATS_URL"

// checkRedlock checks the redlock servers: each a host:port, each once (a
// server listed twice would count twice towards the majority), and an odd
// number of at least three (an even one tolerates no more failures than
// the odd number below it, and fewer than three tolerate none).
func (c Config) checkRedlock(bad func(flagName, env, format string, args ...any)) {
	if len(c.RedlockAddrs) == 0 {
		return
	}
	seen := map[string]bool{}
	for _, a := range c.RedlockAddrs {
		if _, port, err := net.SplitHostPort(a); err != nil || !validPort(port) {
			bad("redlock-addrs", "REDLOCK_ADDRS", "%q is not host:port (for example 127.0.0.1:6380)", a)
		} else if seen[a] {
			bad("redlock-addrs", "REDLOCK_ADDRS", "%q is listed twice: give each independent redis-server once", a)
		}
		seen[a] = true
	}
	if n := len(c.RedlockAddrs); n < 3 || n%2 == 0 {
		bad("redlock-addrs", "REDLOCK_ADDRS", "%d listed: give an odd number of at least 3 independent redis-servers (5 tolerate 2 down)", n)
	}
}

// EtcdLockTTL is the lease TTL the etcd-lock strategy uses for lockTTL:
// rounded up to whole seconds, since etcd leases have no finer grain (and
// rounding down could hand out a lease shorter than asked, or none at all).
func EtcdLockTTL(lockTTL time.Duration) time.Duration {
	ttl := (lockTTL + time.Second - 1).Truncate(time.Second)
	return max(ttl, time.Second)
}

// checkEtcdEndpoint accepts what the etcd client dials: a URL with the
// http or https scheme and a host:port, or a bare host:port.
func checkEtcdEndpoint(ep string) error {
	hostport := ep
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return fmt.Errorf("not a URL: %w", err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("scheme %q: want http:// or https://, for example http://127.0.0.1:2379", u.Scheme)
		}
		if u.Path != "" && u.Path != "/" {
			return fmt.Errorf("a client URL has no path, for example http://127.0.0.1:2379")
		}
		hostport = u.Host
	}
	if _, port, err := net.SplitHostPort(hostport); err != nil || !validPort(port) {
		return fmt.Errorf("want a client URL with host and port, for example http://127.0.0.1:2379")
	}
	return nil
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n < 1<<16
}

// flag.Value implementations over Config's fields, so that one table
// drives flags, environment variables and --help.
type (
	stringValue   string
	durationValue time.Duration
	int64Value    int64
	intValue      int
	boolValue     bool
	listValue     []string
)

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration (want for example 500ms or 2s)")
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return time.Duration(*v).String() }

func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("not a whole number")
	}
	*v = int64Value(n)
	return nil
}
func (v *int64Value) String() string { return strconv.FormatInt(int64(*v), 10) }

func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("not a whole number")
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true or false")
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

// Set splits a comma-separated list, dropping blanks, and replaces the
// list: a flag given after its environment variable wins, not appends.
func (v *listValue) Set(s string) error {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	*v = out
	return nil
}
func (v *listValue) String() string { return strings.Join(*v, ",") }
