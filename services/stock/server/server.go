// Package server is the stock service: one replica's HTTP API over
// package inventory, with its MongoDB, Redis and (optionally) etcd clients,
// its locks and its metrics. It is a package, not only a main, so that tests and the load
// harness can run several replicas in one process, each with clients of its
// own, exactly as separate processes would.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory/mongostore"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.uber.org/zap"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/lock"
)

// LocksCollection is the collection of the mongo-lease strategy's leases,
// in the configured database.
const LocksCollection = "locks"

// connectTimeout bounds the start-up pings of MongoDB and Redis, and each
// attempt of a start-up step that prepares the store (prepare).
const connectTimeout = 10 * time.Second

// prepareAttempts bounds the attempts of a start-up step (prepare).
const prepareAttempts = 4

// Server is one replica. Create it with New, serve with Serve, stop with
// Shutdown.
type Server struct {
	cfg    Config
	logger *slog.Logger

	mongo    *mongo.Client           // the sales': decrements, holds, their locks; --mongo-pool connections
	redis    redis.UniversalClient   // a *redis.ClusterClient with --redis-cluster-addrs
	etcd     *clientv3.Client        // nil unless --etcd-endpoints is set
	redlocks []redis.UniversalClient // one per --redlock-addrs server; nil without them
	nats     *nats.Conn              // the queued strategy's; nil without --nats-url
	backends []lock.Backend          // the lock services' backends, closed before the clients
	// control serves the admin routes and /readyz, background the
	// heartbeats and recovery: each a MongoDB client with a pool of its
	// own, so that sales that take every connection of theirs delay
	// neither (docs/overload.md).
	control, background *mongo.Client

	store      *mongostore.Store // the sales' (s.mongo)
	adminStore *mongostore.Store // the same store through s.control
	bgStore    *mongostore.Store // the same store through s.background
	strategies map[string]inventory.Strategy
	// holders are the strategies that take part in holds (the registry's
	// Holds): mongostore.Built's Holder.
	holders    map[string]inventory.Holder
	locked     []*mongostore.Locked
	redisStock *mongostore.RedisStock // nil unless built
	queued     *mongostore.Queued     // nil unless built: its consumers run with the recovery

	metrics      *metrics
	sales        *admission   // the admission of the sale routes (admitSale)
	echo         *echo.Echo   // the API, and health and metrics unless InternalAddr is set
	internal     *echo.Echo   // health and metrics; the same as echo unless InternalAddr is set
	handler      http.Handler // echo, wrapped by Config.wrapHandler if set
	internalH    http.Handler // internal, wrapped by Config.wrapHandler if set
	http         *http.Server
	internalHTTP *http.Server
	ready        readyCache

	stopRecovery context.CancelFunc
	recovered    chan struct{} // closed when the recovery loop has stopped

	// writes counts the in-flight requests that may write (decrements and
	// PUTs); Shutdown waits for them before it releases locks and closes
	// clients. draining refuses new ones once Shutdown has begun.
	drainMu  sync.Mutex
	draining bool
	writes   sync.WaitGroup
}

// New connects to MongoDB, Redis and, when cfg.EtcdEndpoints is set, etcd
// (and fails if one does not answer within 10 s, or ctx ends), creates the
// collections it uses and their indexes (each step tried prepareAttempts
// times at most), and builds the strategies: every one of the registry, but
// etcd-lock only with etcd endpoints and redlock only with redlock servers
// (a majority of which must answer). It does not listen; call Serve. A nil
// logger means slog.Default().
func New(ctx context.Context, cfg Config, logger *slog.Logger) (srv *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{cfg: cfg, logger: logger, metrics: newMetrics()}
	s.sales = newAdmission(cfg.SalesLimit, cfg.SalesQueue, cfg.SalesQueueWait, s.metrics.shed)
	s.metrics.watchAdmission(s.sales)
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.closeClients(cctx)
		}
	}()

	wc, _ := mongostore.ParseWriteConcern(cfg.WriteConcern) // validated above
	for _, c := range []struct {
		client **mongo.Client
		role   string
		pool   int
	}{{&s.mongo, "sales", cfg.MongoPool}, {&s.control, "control", cfg.ControlPool}, {&s.background, "background", backgroundPool}} {
		opts := options.Client().ApplyURI(cfg.MongoURI).SetMaxPoolSize(uint64(c.pool))
		opts.SetAppName("stock-" + cfg.Replica)
		if c.role != "sales" {
			opts.SetAppName("stock-" + cfg.Replica + "-" + c.role)
		}
		if cfg.monitor != nil {
			opts.SetMonitor(cfg.monitor(c.role))
		}
		*c.client, err = mongo.Connect(opts)
		if err != nil {
			return nil, fmt.Errorf("server: MongoDB client for %s: %w", redactURI(cfg.MongoURI), err)
		}
	}
	redisAt, redisCheck := cfg.RedisAddr, "--redis-addr / REDIS_ADDR"
	if len(cfg.RedisCluster) > 0 {
		redisAt, redisCheck = strings.Join(cfg.RedisCluster, ","), "--redis-cluster-addrs / REDIS_CLUSTER_ADDRS"
		s.redis = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.RedisCluster, Password: cfg.RedisPassword, ClientName: "stock-" + cfg.Replica})
	} else {
		s.redis = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, Password: cfg.RedisPassword, ClientName: "stock-" + cfg.Replica})
	}

	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	for _, c := range []*mongo.Client{s.mongo, s.control, s.background} {
		if err := c.Ping(pctx, nil); err != nil {
			return nil, fmt.Errorf("server: MongoDB at %s does not answer (check --mongo-uri / MONGO_URI): %w", redactURI(cfg.MongoURI), err)
		}
	}
	if err := s.redis.Ping(pctx).Err(); err != nil {
		return nil, fmt.Errorf("server: Redis at %s does not answer (check %s): %w", redisAt, redisCheck, err)
	}
	if len(cfg.EtcdEndpoints) > 0 {
		s.etcd, err = clientv3.New(clientv3.Config{
			Endpoints:   cfg.EtcdEndpoints,
			DialTimeout: connectTimeout,
			// The client's own zap logger would print its reconnects as
			// unstructured noise beside the replica's log; failures reach
			// us as errors anyway.
			Logger: zap.NewNop(),
		})
		if err != nil {
			return nil, fmt.Errorf("server: etcd client for %v (check --etcd-endpoints / ETCD_ENDPOINTS): %w", cfg.EtcdEndpoints, err)
		}
		// The client dials lazily: only a request shows that etcd answers.
		if err := pingEtcd(pctx, s.etcd); err != nil {
			return nil, fmt.Errorf("server: etcd at %v does not answer (check --etcd-endpoints / ETCD_ENDPOINTS): %w", cfg.EtcdEndpoints, err)
		}
	}
	if err := s.connectRedlock(pctx); err != nil {
		return nil, err
	}
	if cfg.NATSURL != "" {
		s.nats, err = nats.Connect(cfg.NATSURL, nats.Name("stock-"+cfg.Replica), nats.Timeout(connectTimeout), nats.MaxReconnects(-1))
		if err != nil {
			return nil, fmt.Errorf("server: NATS at %s does not answer (check --nats-url / NATS_URL): %w", cfg.NATSURL, err)
		}
	}

	db := s.mongo.Database(cfg.DB)
	s.store, err = mongostore.NewStore(db, mongostore.StoreOptions{
		Replica: cfg.Replica, WriteConcern: wc, KeyRetention: cfg.KeyRetention, AfterTake: cfg.afterTake, Logger: logger,
		// An attempt of a replica that still beats is given up only long
		// after any of its decrements could still be running; a dead
		// replica's are given up after DeadAfter.
		AbandonAfter: max(mongostore.DefaultAbandonAfter, 2*cfg.WriteBudget()),
		DeadAfter:    cfg.DeadAfter,
	})
	if err != nil {
		return nil, err
	}
	s.adminStore = s.store.Via(s.control.Database(cfg.DB))
	s.bgStore = s.store.Via(s.background.Database(cfg.DB))
	// Every collection exists before the first request: one created by a
	// request's write is created within that request's deadline, and
	// FerretDB can leave it half made (see mongostore.EnsureCollections).
	// Each step within its own timeout: a creation cut off by one shared
	// with the indexes could leave a collection half made.
	if err := prepare(ctx, "create the store's collections", s.store.EnsureCollections); err != nil {
		return nil, fmt.Errorf("server: %w (check --mongo-uri / MONGO_URI)", err)
	}
	if err := prepare(ctx, "create the store's indexes", s.store.EnsureIndexes); err != nil {
		return nil, fmt.Errorf("server: %w (check --mongo-uri / MONGO_URI)", err)
	}
	// Refuse to join a fleet this replica would harm: a live process
	// with its name, or live replicas with another heartbeat timeout.
	cctx, cancel := context.WithTimeout(ctx, connectTimeout+cfg.DeadAfter)
	defer cancel()
	if err := s.bgStore.CheckPeers(cctx); err != nil {
		return nil, fmt.Errorf("server: check --replica / REPLICA_ID and --heartbeat-timeout / HEARTBEAT_TIMEOUT: %w", err)
	}
	// Beat once before serving: an attempt of this replica is then never
	// of an instance the others have not seen.
	hctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if _, err := s.bgStore.Heartbeat(hctx); err != nil {
		return nil, fmt.Errorf("server: first heartbeat: %w", err)
	}
	if err := s.buildStrategies(ctx, db, wc); err != nil {
		return nil, err
	}
	s.echo, s.internal = s.routes()
	s.startRecovery(ctx)
	s.handler, s.internalH = s.echo, s.internal
	if cfg.wrapHandler != nil {
		s.handler, s.internalH = cfg.wrapHandler(s.echo), cfg.wrapHandler(s.internal)
	}
	s.http = s.httpServer(ctx, s.handler)
	s.internalHTTP = s.httpServer(ctx, s.internalH)
	logger.Info("replica ready",
		slog.String("db", cfg.DB), slog.String("redis", redisAt), slog.Any("etcd", cfg.EtcdEndpoints), slog.Any("redlock", cfg.RedlockAddrs), slog.String("default_strategy", cfg.Strategy),
		slog.Duration("lock_ttl", cfg.LockTTL), slog.Duration("lock_wait", cfg.LockWait),
		slog.Duration("rmw_delay", cfg.RMWDelay), slog.Bool("fencing", cfg.Fencing), slog.String("write_concern", cfg.WriteConcern),
		slog.Duration("lock_skew", cfg.LockSkew), slog.Duration("write_stall", cfg.WriteStall),
		slog.Int("sales_concurrency", cfg.SalesLimit), slog.Int("sales_queue", cfg.SalesQueue), slog.Duration("sales_queue_wait", cfg.SalesQueueWait),
		slog.Int("mongo_pool", cfg.MongoPool), slog.Int("control_pool", cfg.ControlPool))
	if s.nats != nil {
		q := cfg.QueuedOptions()
		logger.Info("queued stream", slog.String("storage", cfg.QueuedStorage), slog.Int("replicas", q.Replicas),
			slog.Duration("dedup", cfg.QueuedDedup), slog.Duration("apply_delay", cfg.QueuedDelay))
	}
	if cfg.ClockOffset != 0 {
		logger.Warn("fault drill: this replica's mongo-lease clock is shifted", slog.Duration("clock_offset", cfg.ClockOffset), slog.Duration("lock_skew", cfg.LockSkew))
	}
	if !cfg.Fencing {
		logger.Warn("fencing is OFF: a lock holder that stalls past its TTL can overwrite a newer holder's write (teaching mode)")
	}
	if s.nats == nil {
		logger.Info("NATS not configured: the queued strategy answers 503 strategy_unavailable", slog.String("needs", natsNeeds))
	}
	for _, svc := range strategy.LockServices() {
		if !configured(cfg, svc.Name) {
			logger.Info("lock service not configured: its strategies answer 503 strategy_unavailable",
				slog.String("lock_service", svc.Name), slog.Any("strategies", strategy.Using(svc.Name)), slog.String("needs", lockServices[svc.Name].Needs))
		}
	}
	if ttl := EtcdLockTTL(cfg.LockTTL); s.etcd != nil && ttl != cfg.LockTTL {
		logger.Info("etcd-lock leases are whole seconds: lock TTL rounded up", slog.Duration("lock_ttl", cfg.LockTTL), slog.Duration("etcd_lock_ttl", ttl))
	}
	return s, nil
}

// buildStrategies builds every strategy of the registry that this replica
// offers: the unsafe ones only in demo mode, and those whose lock service
// is configured (etcd-lock needs etcd endpoints).
func (s *Server) buildStrategies(ctx context.Context, db *mongo.Database, wc *writeconcern.WriteConcern) error {
	cfg := s.cfg
	lockers, err := s.buildLockers(ctx, db, wc)
	if err != nil {
		return err
	}
	deps := mongostore.Deps{
		Store: s.store, Lockers: lockers, Fencing: cfg.Fencing, LockWait: cfg.LockWait,
		Delay: cfg.RMWDelay, Stall: cfg.WriteStall, CASAttempts: cfg.CASAttempts,
		Buckets: cfg.Buckets, Observer: s.metrics, SoldOut: s.metrics, Logger: s.logger,
		RedisStock: mongostore.RedisStockOptions{
			Client: s.redis, KeyPrefix: mongostore.RedisStockKeyPrefix(cfg.DB),
			AckAfterRedis: cfg.RedisStockAck == RedisStockAckRedis, Wait: cfg.RedisStockWait, Flush: cfg.RedisStockFlush, Grace: cfg.RecoveryGrace,
			Observer: s.metrics, Background: s.bgStore,
		},
		NATS: s.nats, Queued: cfg.QueuedOptions(),
	}
	s.strategies = map[string]inventory.Strategy{}
	s.holders = map[string]inventory.Holder{}
	for _, in := range strategy.All() {
		if (!in.Safe && !cfg.Demo) || (in.Locks() && lockers[in.Lock] == nil) || (in.Name == strategy.Queued && s.nats == nil) {
			continue
		}
		b, err := mongostore.Build(in, deps)
		if err != nil {
			return fmt.Errorf("server: strategy %s: %w", in.Name, err)
		}
		if b.Locked != nil {
			s.locked = append(s.locked, b.Locked)
		}
		if b.RedisStock != nil {
			s.redisStock = b.RedisStock
			s.metrics.watchRedisStock(b.RedisStock, s.adminStore, s.logger)
		}
		if b.Holder != nil {
			s.holders[in.Name] = b.Holder
		}
		if b.Queued != nil {
			s.queued = b.Queued
			s.metrics.watchQueued(b.Queued, s.logger)
		}
		s.strategies[in.Name] = b.Strategy
	}
	return nil
}

// buildLockers returns a Locker per lock service this replica has (see
// lockServices), whose backends are made within ctx. Each reports its lock
// events to the metrics under the strategy that uses it.
func (s *Server) buildLockers(ctx context.Context, db *mongo.Database, wc *writeconcern.WriteConcern) (map[string]*lock.Locker, error) {
	cfg := s.cfg
	deps := LockDeps{Config: cfg, DB: db, WriteConcern: wc, Redis: s.redis, Etcd: s.etcd, Redlock: s.redlocks}
	lockers := map[string]*lock.Locker{}
	for _, svc := range strategy.LockServices() {
		if !configured(cfg, svc.Name) {
			continue
		}
		backend, more, err := lockServices[svc.Name].Backend(ctx, deps)
		if err != nil {
			return nil, fmt.Errorf("server: %s lock backend: %w", svc.Name, err)
		}
		s.backends = append(s.backends, backend)
		opts := append([]lock.Option{lock.WithTTL(cfg.LockTTL), lock.WithOwnerPrefix(cfg.Replica),
			lock.WithObserver(s.metrics.lockObserver(strategyOfLock(svc.Name)))}, more...)
		if lockers[svc.Name], err = lock.New(backend, opts...); err != nil {
			return nil, fmt.Errorf("server: %s locker (check --lock-ttl / LOCK_TTL): %w", svc.Name, err)
		}
	}
	return lockers, nil
}

// prepare runs f, a start-up step that prepares the store, until it
// succeeds: at most prepareAttempts times, each within connectTimeout and
// ctx, a little longer apart each time. f must be idempotent.
func prepare(ctx context.Context, what string, f func(context.Context) error) error {
	var err error
	for n := range prepareAttempts {
		if n > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %w after %d attempts, the last: %w", what, ctx.Err(), n, err)
			case <-time.After(time.Duration(n) * 250 * time.Millisecond):
			}
		}
		actx, cancel := context.WithTimeout(ctx, connectTimeout)
		err = f(actx)
		cancel()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("%s: %d attempts failed, the last: %w", what, prepareAttempts, err)
}

// strategyOfLock returns the name of the strategy that takes its leases
// from lock service svc: the label of that service's lock metrics.
func strategyOfLock(svc string) string {
	if names := strategy.Using(svc); len(names) > 0 {
		return names[0]
	}
	return svc
}

// connectRedlock makes a client per redlock server and checks that a
// majority answers: a Redlock grants nothing with fewer, while a minority
// down is what it is built to survive (and what its drills do). The
// clients never retry: each round waits for a server at most a tenth of
// the TTL (redlock.TimeoutFactor), and a retry of a server that is down
// would spend that time in vain.
func (s *Server) connectRedlock(ctx context.Context) error {
	cfg := s.cfg
	if len(cfg.RedlockAddrs) == 0 {
		return nil
	}
	for _, a := range cfg.RedlockAddrs {
		s.redlocks = append(s.redlocks, redis.NewClient(&redis.Options{
			Addr: a, ClientName: "stock-" + cfg.Replica, MaxRetries: -1, DialerRetries: 1,
		}))
	}
	errs := make([]error, len(s.redlocks))
	var wg sync.WaitGroup
	for i, c := range s.redlocks {
		wg.Go(func() { errs[i] = c.Ping(ctx).Err() })
	}
	wg.Wait()
	var down []error
	for i, err := range errs {
		if err != nil {
			down = append(down, fmt.Errorf("%s: %w", cfg.RedlockAddrs[i], err))
		}
	}
	if up := len(s.redlocks) - len(down); up < len(s.redlocks)/2+1 {
		return fmt.Errorf("server: only %d of %d redlock servers answer, fewer than a majority (check --redlock-addrs / REDLOCK_ADDRS): %w",
			up, len(s.redlocks), errors.Join(down...))
	}
	if len(down) > 0 {
		s.logger.Warn("redlock: some servers do not answer; a majority does", slog.Any("down", errors.Join(down...)))
	}
	return nil
}

func (s *Server) httpServer(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// Room for the request's work and then its commit, which is not
		// cut short by the request timeout (see mongostore.StoreOptions).
		WriteTimeout: s.cfg.WriteBudget() + 5*time.Second,
		IdleTimeout:  time.Minute,
		ErrorLog:     slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		BaseContext:  func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

// Handler returns the replica's API handler, for tests that serve it
// without a listener. It serves /healthz, /readyz and /metrics too unless
// InternalAddr is set.
func (s *Server) Handler() http.Handler { return s.handler }

// InternalHandler returns the handler of /healthz, /readyz and /metrics:
// the same as Handler unless InternalAddr is set.
func (s *Server) InternalHandler() http.Handler { return s.internalH }

// Serve accepts the API's connections on ln until Shutdown. It returns nil
// after Shutdown, and the listener's error otherwise.
func (s *Server) Serve(ln net.Listener) error {
	return serve(s.logger, s.http, ln, "serving")
}

// ServeInternal accepts connections to /healthz, /readyz and /metrics on
// ln until Shutdown; call it when InternalAddr is set.
func (s *Server) ServeInternal(ln net.Listener) error {
	return serve(s.logger, s.internalHTTP, ln, "serving health and metrics")
}

func serve(logger *slog.Logger, h *http.Server, ln net.Listener, what string) error {
	logger.Info(what, slog.String("addr", ln.Addr().String()))
	if err := h.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: serve on %s: %w", ln.Addr(), err)
	}
	return nil
}

// Shutdown stops the replica without losing a sale: it refuses new
// decrements and PUTs (503 shutting_down), stops accepting connections,
// waits for in-flight requests until ctx ends, and waits for every
// in-flight decrement and PUT to finish, its stock write and its ledger
// write included, whatever ctx says: they are bounded by WriteBudget. Only
// then does it release the leases still held (so other replicas need not
// wait out their TTL) and close the clients.
func (s *Server) Shutdown(ctx context.Context) error {
	s.logger.Info("shutting down")
	s.drainMu.Lock()
	s.draining = true
	s.drainMu.Unlock()
	var errs []error
	for _, h := range []*http.Server{s.http, s.internalHTTP} {
		err := h.Shutdown(ctx)
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			// Reads still running are cut off; decrements and PUTs are
			// waited for below, so nothing is lost.
			s.logger.Warn("shutdown timeout passed with requests in flight: reads are cut off, writes are waited for")
		case err != nil:
			errs = append(errs, fmt.Errorf("server: stop HTTP: %w", err))
		}
	}
	writing := s.waitWrites()
	if writing != nil {
		errs = append(errs, writing)
	}
	s.stopRecovery()
	<-s.recovered
	if writing == nil {
		// Nothing of this replica is in flight: the others may settle
		// what it left at once, and a successor of its name need not
		// watch its heartbeat.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if err := s.bgStore.Leave(lctx); err != nil {
			s.logger.Warn("could not mark this replica's heartbeat stopped: the others take it for dead after --heartbeat-timeout, and a restart waits two fifths of it", slog.Any("error", err))
		}
		cancel()
	}
	for _, l := range s.locked {
		if n := l.Held(); n > 0 {
			s.logger.Warn("releasing leases of unfinished requests", slog.String("strategy", l.Name()), slog.Int("leases", n))
		}
		l.Close()
	}
	// Disconnect needs a live context to end its sessions cleanly, even
	// if the caller's deadline for draining requests has passed.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.closeClients(cctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// WriteBudget is the longest a decrement or a PUT can run once admitted:
// its request budget, then the writes that are not cut short with it, each
// bounded by mongostore.DefaultWriteTimeout: an idempotency reservation,
// the fenced read, the stock write, the ledger record, and the settlement
// of the key. Shutdown waits this long for them at most; in practice they
// take milliseconds.
func (c Config) WriteBudget() time.Duration {
	return c.RequestTimeout + 5*mongostore.DefaultWriteTimeout
}

// waitWrites waits for the in-flight writes, at most WriteBudget.
func (s *Server) waitWrites() error {
	done := make(chan struct{})
	go func() {
		s.writes.Wait()
		close(done)
	}()
	t := time.NewTimer(s.cfg.WriteBudget())
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("server: in-flight writes still running after %v", s.cfg.WriteBudget())
	}
}

func (s *Server) closeClients(ctx context.Context) error {
	var errs []error
	// The backends first: the etcd one revokes its spare leases through
	// its client, and both it and the Redis one stop watches that would
	// otherwise outlive them.
	for _, b := range s.backends {
		if c, ok := b.(interface{ Close() error }); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("server: close %T: %w", b, err))
			}
		}
	}
	for i, c := range s.redlocks {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("server: close redlock client %s: %w", s.cfg.RedlockAddrs[i], err))
		}
	}
	if s.etcd != nil {
		if err := s.etcd.Close(); err != nil {
			errs = append(errs, fmt.Errorf("server: close etcd client: %w", err))
		}
	}
	if s.nats != nil {
		s.nats.Close()
	}
	if s.redis != nil {
		if err := s.redis.Close(); err != nil {
			errs = append(errs, fmt.Errorf("server: close Redis client: %w", err))
		}
	}
	for _, c := range []*mongo.Client{s.mongo, s.control, s.background} {
		if c == nil {
			continue
		}
		if err := c.Disconnect(ctx); err != nil {
			errs = append(errs, fmt.Errorf("server: disconnect MongoDB: %w", err))
		}
	}
	return errors.Join(errs...)
}

// pingEtcd checks that the etcd cluster answers a linearizable read, which
// needs a leader and a quorum: what a lock grant needs too.
func pingEtcd(ctx context.Context, c *clientv3.Client) error {
	_, err := c.Get(ctx, "stocklock/ping")
	return err
}

// redactURI drops the password from a MongoDB URI for messages.
func redactURI(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return "(unparsable URI)"
	}
	return u.Redacted()
}
