// Package env starts and supervises what a harness run needs on one
// machine: the stores (MongoDB, Redis, etcd, from internal/devstore) and N
// processes of the stock service on free loopback ports, with their logs,
// and kills, pauses, restarts and reconfigures those processes on demand.
package env

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/freeport"
	"github.com/stocklock/stocklock/pkg/stockclient"
)

const (
	buildTimeout = 10 * time.Minute
	stopGrace    = 5 * time.Second
)

// MaxReplicas bounds the replica processes an Env runs (REPLICA_IDs a to h).
const MaxReplicas = 8

// ErrUnsupported means the environment cannot inject a fault here: a store
// it did not start, or a platform without the signal it needs.
var ErrUnsupported = errors.New("not supported by this environment")

// DB is the replicas' database (MONGO_DB), and the namespace of their lock
// keys in Redis, etcd and the Redlock servers.
const DB = "stocklock"

// HeartbeatTimeout is the replicas' --heartbeat-timeout: how long one
// replica's heartbeat must stand still before the others give up its
// keyed requests (the keyed drill freezes a replica for longer).
const HeartbeatTimeout = 5 * time.Second

// ReplicaID is the REPLICA_ID of the i-th replica: a, b, c, ...
func ReplicaID(i int) string { return string(rune('a' + i)) }

// Options say what Start starts.
type Options struct {
	Replicas    int  // replica processes, 1..MaxReplicas
	EtcdCluster bool // a three-member embedded etcd instead of one member
	NATSCluster bool // a three-server embedded JetStream cluster instead of one server
	RedisClock  bool // a private redis-server whose clock can be moved (needs gcc)
	// RedisCluster starts a Redis Cluster (REDIS_CLUSTER_ADDRS, else 3
	// masters + 3 replicas on loopback), given as REDIS_CLUSTER_ADDRS.
	RedisCluster bool
	StockBin     string        // a prebuilt services/stock binary; "": go build it
	OutDir       string        // where replica-<id>.log and devstore.log go
	Log          io.Writer     // progress lines
	ReplicaLog   bool          // also copy the replicas' logs to Log
	ReadyWait    time.Duration // how long a replica may take to answer /readyz
	AdminToken   string        // every replica's ADMIN_TOKEN
	// Flags go to every replica, after --addr and --demo; a drill's own
	// flags (Configure) come after them and win.
	Flags []string
	// Network puts every replica's links to the stores behind proxies of
	// its own, for the network drills (Partition, Slow, CutAfter, Heal).
	Network bool
	// NetworkIfPossible is Network where the stores allow it (see
	// Networked), and direct links otherwise.
	NetworkIfPossible bool
	// Redlock starts RedlockServers independent Redis servers (see
	// startRedlock) and gives every replica their REDLOCK_ADDRS.
	Redlock bool
}

// Env is everything Start started. Its methods are not safe for
// concurrent use, except Bases, Procs and Close.
type Env struct {
	opt Options
	// Mongo, Redis and Etcd are the stores the replicas use.
	Mongo *devstore.Mongo
	Redis *devstore.Redis
	Etcd  *devstore.Etcd
	// NATS is the queued strategy's broker (NATS_URL, else embedded).
	NATS *devstore.NATS
	// Cluster is the Redis Cluster the replicas use instead of Redis
	// (Options.RedisCluster; Redis is nil then).
	Cluster   *devstore.RedisCluster
	redlock   redlockStores        // the servers of Options.Redlock; see Redlock
	net       *toxiproxy.ApiServer // the proxies of Options.Network
	tmpDir    string
	bin       string
	mu        sync.Mutex // guards procs against Procs and Close
	procs     []*replicaProc
	storeLog  *os.File
	closeOnce sync.Once

	Store, RedisText, EtcdText string // the stores in use, for the report
}

// replicaProc is one running replica process.
type replicaProc struct {
	id      string
	base    string
	port    int
	extra   []string // flags beyond the ones every replica gets (fault drills)
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	exited  chan struct{} // closed when the process has been waited for
	waitErr error
}

func (e *Env) logf(format string, a ...any) { fmt.Fprintf(e.opt.Log, format+"\n", a...) }

// Start starts the stores (devstore), builds ./services/stock unless given
// a binary, and starts the replicas, waiting until they are ready. On
// error it stops whatever it had started; else the caller must Close it.
func Start(ctx context.Context, opt Options) (_ *Env, err error) {
	if opt.Replicas < 1 || opt.Replicas > MaxReplicas {
		return nil, fmt.Errorf("env: %d replicas: must be between 1 and %d", opt.Replicas, MaxReplicas)
	}
	if opt.Log == nil {
		opt.Log = io.Discard
	}
	e := &Env{opt: opt}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()

	// devstore logs (FerretDB's complaints included) go to a file: the
	// terminal gets the harness's own progress lines.
	if e.storeLog, err = os.Create(filepath.Join(opt.OutDir, "devstore.log")); err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(e.storeLog, &slog.HandlerOptions{Level: slog.LevelInfo}))

	e.logf("starting MongoDB (MONGO_URI, else FerretDB behind the per-document gate, in a devstored process that the first run builds: minutes on a cold build cache)...")
	t0 := time.Now()
	if e.Mongo, err = devstore.StartMongo(ctx, logger); err != nil {
		return nil, fmt.Errorf("start MongoDB: %w", err)
	}
	switch e.Mongo.Kind {
	case devstore.KindFerretDB:
		backend := map[string]string{devstore.BackendPostgreSQL: "PostgreSQL", devstore.BackendSQLite: "SQLite"}[e.Mongo.Backend]
		e.Store = "embedded FerretDB v1 on " + cmp.Or(backend, e.Mongo.Backend) + " behind the per-document gate (far slower than a real MongoDB)"
	case devstore.KindExternal:
		e.Store = "real MongoDB at " + redactURI(e.Mongo.URI) + " (MONGO_URI)"
	case devstore.KindTestcontainers:
		e.Store = "real MongoDB in a container (testcontainers)"
	default:
		e.Store = e.Mongo.Kind
	}
	e.logf("  MongoDB: %s [%s]", e.Store, time.Since(t0).Round(time.Millisecond))

	if err := e.startRedis(ctx, logger); err != nil {
		return nil, err
	}
	if err := e.startEtcd(ctx, logger); err != nil {
		return nil, err
	}
	if err := e.startRedlock(ctx, logger); err != nil {
		return nil, err
	}
	if err := e.startNATS(ctx, logger); err != nil {
		return nil, err
	}

	if opt.Network || opt.NetworkIfPossible {
		switch err := e.canProxy(); {
		case err != nil && opt.Network:
			return nil, err
		case err != nil:
			e.logf("  network: direct links (%v)", err)
		default:
			e.net = newNetwork()
			e.logf("  network: every replica reaches the stores through proxies of its own (Toxiproxy %s, in this process)", toxiproxyVersion)
		}
	}

	if e.tmpDir, err = os.MkdirTemp("", "stocklock-loadtest-"); err != nil {
		return nil, err
	}
	e.bin = opt.StockBin
	if e.bin == "" {
		if e.bin, err = e.build(ctx); err != nil {
			return nil, err
		}
	}
	if err := e.Scale(ctx, opt.Replicas); err != nil {
		return nil, err
	}
	return e, nil
}

// startRedis starts the one Redis the replicas use, or the Redis Cluster
// of Options.RedisCluster.
func (e *Env) startRedis(ctx context.Context, logger *slog.Logger) (err error) {
	t0 := time.Now()
	defer func() {
		if err == nil {
			e.logf("  Redis: %s [%s]", e.RedisText, time.Since(t0).Round(time.Millisecond))
		}
	}()
	if e.opt.RedisCluster {
		e.logf("starting a Redis Cluster (REDIS_CLUSTER_ADDRS, else 3 masters + 3 replicas of redis-server on loopback)...")
		if e.Cluster, err = devstore.StartRedisCluster(ctx, logger); err != nil {
			return fmt.Errorf("start Redis Cluster: %w", err)
		}
		e.RedisText = "private Redis Cluster, 3 masters + 3 replicas of redis-server, at " + strings.Join(e.Cluster.Addrs, ",")
		if e.Cluster.Kind == devstore.KindExternal {
			e.RedisText = "real Redis Cluster at " + strings.Join(e.Cluster.Addrs, ",") + " (REDIS_CLUSTER_ADDRS)"
		}
		return nil
	}
	e.logf("starting Redis (REDIS_ADDR, else redis-server from PATH, else miniredis)...")
	startRedis := devstore.StartRedis
	if e.opt.RedisClock {
		startRedis = devstore.StartRedisClock
	}
	if e.Redis, err = startRedis(ctx, logger); err != nil {
		return fmt.Errorf("start Redis: %w", err)
	}
	switch e.Redis.Kind {
	case devstore.KindExternal:
		e.RedisText = "real Redis at " + e.Redis.Addr + " (REDIS_ADDR)"
	case devstore.KindRedisServer:
		e.RedisText = "private redis-server at " + e.Redis.Addr
	case devstore.KindMiniredis:
		e.RedisText = "miniredis (in-process stand-in, not a real Redis) at " + e.Redis.Addr
	default:
		e.RedisText = e.Redis.Kind + " at " + e.Redis.Addr
	}
	return nil
}

// startEtcd starts etcd: one member, or three for Options.EtcdCluster.
func (e *Env) startEtcd(ctx context.Context, logger *slog.Logger) error {
	var err error
	// An embedded etcd runs in devstored processes; the replicas reach it
	// over loopback like any etcd.
	t0 := time.Now()
	if e.opt.EtcdCluster {
		// The leader-kill drill needs a leader to kill and a quorum that
		// survives it.
		e.logf("starting a three-member embedded etcd cluster (for the leader-kill drill)...")
		if e.Etcd, err = devstore.StartEtcdCluster(ctx, logger, 3); err != nil {
			return fmt.Errorf("start etcd cluster: %w", err)
		}
	} else {
		e.logf("starting etcd (ETCD_ENDPOINTS, else an embedded etcd server)...")
		if e.Etcd, err = devstore.StartEtcd(ctx, logger); err != nil {
			return fmt.Errorf("start etcd: %w", err)
		}
	}
	switch e.Etcd.Kind {
	case devstore.KindExternal:
		e.EtcdText = "real etcd at " + strings.Join(e.Etcd.Endpoints, ",") + " (ETCD_ENDPOINTS)"
	case devstore.KindEmbeddedEtcd:
		members := "single member"
		if len(e.Etcd.Endpoints) > 1 {
			members = fmt.Sprintf("%d members", len(e.Etcd.Endpoints))
		}
		e.EtcdText = "embedded etcd server (" + members + ", fsync on) at " + strings.Join(e.Etcd.Endpoints, ",")
	default:
		e.EtcdText = e.Etcd.Kind + " at " + strings.Join(e.Etcd.Endpoints, ",")
	}
	e.logf("  etcd: %s [%s]", e.EtcdText, time.Since(t0).Round(time.Millisecond))
	return nil
}

// Scale starts or stops replicas until n run: new ones get the next ids and
// free ports, and the ones beyond n stop (the last first).
func (e *Env) Scale(ctx context.Context, n int) error {
	if n < 1 || n > MaxReplicas {
		return fmt.Errorf("env: %d replicas: must be between 1 and %d", n, MaxReplicas)
	}
	for len(e.procs) > n {
		last := e.procs[len(e.procs)-1]
		last.stop()
		e.mu.Lock()
		e.procs = e.procs[:len(e.procs)-1]
		e.mu.Unlock()
		e.logf("stopped replica %s", last.id)
	}
	if len(e.procs) == n {
		return nil
	}
	ports, err := e.replicaPorts(len(e.procs), n)
	if err != nil {
		return fmt.Errorf("free ports for the replicas: %w", err)
	}
	var started []*replicaProc
	for _, port := range ports {
		var extra []string
		if len(e.procs) > 0 {
			extra = e.procs[0].extra
		}
		p, err := e.startReplica(ReplicaID(len(e.procs)), port, extra)
		if err != nil {
			return err
		}
		e.mu.Lock()
		e.procs = append(e.procs, p)
		e.mu.Unlock()
		started = append(started, p)
	}
	return e.waitReady(ctx, started)
}

// Bases are the replicas' base URLs, by index.
func (e *Env) Bases() []string {
	var out []string
	for _, p := range e.Procs() {
		out = append(out, p.Base)
	}
	return out
}

// Len is how many replicas run (or were killed and not yet restarted).
func (e *Env) Len() int { return len(e.procs) }

// ID is replica i's REPLICA_ID.
func (e *Env) ID(i int) string { return e.procs[i].id }

// waitReady waits until every one of procs answers /readyz, failing early
// with its last log lines if one exits.
func (e *Env) waitReady(ctx context.Context, procs []*replicaProc) error {
	e.logf("waiting for the replicas' /readyz...")
	t0 := time.Now()
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var bases []string
	for _, p := range procs {
		bases = append(bases, p.base)
		go func() {
			select {
			case <-p.exited:
				cancel(fmt.Errorf("replica %s exited (%v); last log lines:\n%s", p.id, p.waitErr, tail(p.logPath, 15)))
			case <-rctx.Done():
			}
		}()
	}
	a := stockclient.New("", stockclient.WithTimeout(5*time.Second))
	if err := a.WaitReady(rctx, bases, e.opt.ReadyWait, func(s string) { e.logf("  %s", s) }); err != nil {
		if c := context.Cause(rctx); c != nil && ctx.Err() == nil && !errors.Is(c, context.Canceled) {
			return c
		}
		return err
	}
	// The port of a restarted replica was free for a moment: make sure the
	// server that answered is the replica just started, not another
	// process that took the port meanwhile.
	for _, p := range procs {
		health, err := a.At(p.base).Health(ctx)
		name := health.Replica
		if err != nil {
			return fmt.Errorf("replica %s: %w", p.id, err)
		}
		if p.done() {
			return fmt.Errorf("replica %s exited (%v), and %s answers as replica %q; last log lines:\n%s", p.id, p.waitErr, p.base, name, tail(p.logPath, 15))
		}
		if name != p.id {
			return fmt.Errorf("%s answers as replica %q, not %s: another process took the port", p.base, name, p.id)
		}
	}
	e.logf("  replicas ready: %s [%s]", strings.Join(bases, ", "), time.Since(t0).Round(time.Millisecond))
	return nil
}

// build compiles ./services/stock of the module the harness runs in, as the
// image does (CGO_ENABLED=0, -trimpath).
func (e *Env) build(ctx context.Context) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(e.tmpDir, "stock")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	e.logf("building ./services/stock (go build; the first build on 2 cores can take a few minutes)...")
	t0 := time.Now()
	bctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	// The Dockerfile's build mode, which devstored and the tests' stock
	// binaries use too: a cold build cache compiles the service's
	// dependencies once for all of them.
	cmd := exec.CommandContext(bctx, "go", "build", "-trimpath", "-o", bin, "./services/stock")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	ownGroup(cmd)
	cmd.Cancel = func() error { return signalGroup(cmd, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("go build ./services/stock: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				if ctx.Err() != nil {
					return "", context.Cause(ctx)
				}
				return "", fmt.Errorf("go build ./services/stock: %w\n%s", err, strings.TrimSpace(out.String()))
			}
			e.logf("  built %s [%s]", bin, time.Since(t0).Round(100*time.Millisecond))
			return bin, nil
		case <-tick.C:
			e.logf("  still building... %s", time.Since(t0).Round(time.Second))
		}
	}
}

// moduleRoot is the directory of the go.mod that holds ./services/stock.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w (is Go on PATH?)", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the stocklock module: run the harness from the repository (go run ./loadtest), or pass --replicas")
	}
	root := filepath.Dir(gomod)
	if _, err := os.Stat(filepath.Join(root, "services", "stock")); err != nil {
		return "", fmt.Errorf("%s has no services/stock: run the harness from the stocklock repository, or pass --stock-bin or --replicas", root)
	}
	return root, nil
}

// replicaPorts are free ports for replicas from to n-1, chosen once
// their proxies listen. The ports are released before the replicas bind
// them; freeport picks them outside the range a proxy or client on port 0
// is handed, so only a process that names its port can take one meanwhile,
// and waitReady then says whose answer it got.
func (e *Env) replicaPorts(from, n int) ([]int, error) {
	for k := from; e.net != nil && k < n; k++ {
		if _, _, _, _, err := e.proxyEnv(ReplicaID(k)); err != nil {
			return nil, err
		}
	}
	return freeport.Ports(n - from)
}

// startReplica starts replica id on port with the flags every replica gets
// and extra after them (a later flag wins). Its log is appended to
// replica-<id>.log in the output directory, across restarts.
func (e *Env) startReplica(id string, port int, extra []string) (*replicaProc, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := &replicaProc{id: id, base: "http://" + addr, port: port, extra: extra,
		logPath: filepath.Join(e.opt.OutDir, "replica-"+id+".log"), exited: make(chan struct{})}
	var err error
	if p.logFile, err = os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("replica %s log: %w", id, err)
	}
	// --demo: the harness races the broken strategies and runs the drills
	// on purpose, which a replica refuses by default.
	args := slices.Concat([]string{"--addr", addr, "--demo"}, e.opt.Flags, extra)
	p.cmd = exec.Command(e.bin, args...)
	// Exactly one of REDIS_ADDR and REDIS_CLUSTER_ADDRS (empty is unset):
	// a replica given both refuses to start.
	mongoURI, redisAddr, cluster, etcd, natsURL := e.Mongo.URI, "", "", e.Etcd.Endpoints, e.natsURL()
	if e.Redis != nil {
		redisAddr = e.Redis.Addr
	}
	if e.Cluster != nil {
		cluster = strings.Join(e.Cluster.Addrs, ",")
	}
	if e.net != nil {
		if mongoURI, redisAddr, etcd, natsURL, err = e.proxyEnv(id); err != nil {
			p.logFile.Close()
			return nil, err
		}
	}
	p.cmd.Env = append(os.Environ(),
		"REDIS_ADDR="+redisAddr,
		"REDIS_CLUSTER_ADDRS="+cluster,
		"MONGO_URI="+mongoURI,
		"ETCD_ENDPOINTS="+strings.Join(etcd, ","),
		"REDLOCK_ADDRS="+strings.Join(e.redlock.addrs, ","),
		"NATS_URL="+natsURL,
		"REPLICA_ID="+id,
		"ADMIN_TOKEN="+e.opt.AdminToken,
		"HEARTBEAT_TIMEOUT="+HeartbeatTimeout.String(),
		"MONGO_DB="+DB,
	)
	var out io.Writer = p.logFile
	if e.opt.ReplicaLog {
		out = io.MultiWriter(p.logFile, &prefixed{w: e.opt.Log, prefix: "[" + id + "] "})
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	ownGroup(p.cmd)

	// Start and wait on one locked OS thread: the kernel's parent-death
	// signal follows the thread that forked the child, and a thread the Go
	// runtime retires early would otherwise take the replica with it.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(p.exited)
		err := p.cmd.Start()
		if started <- err; err == nil {
			p.waitErr = p.cmd.Wait()
		}
	}()
	if err := <-started; err != nil {
		p.logFile.Close()
		return nil, fmt.Errorf("start replica %s: %w", id, err)
	}
	e.logf("started replica %s: %s %s (pid %d, log %s)", id, filepath.Base(e.bin), strings.Join(args, " "), p.cmd.Process.Pid, p.logPath)
	return p, nil
}

// done reports whether the replica's process has exited.
func (p *replicaProc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stop ends a replica: SIGTERM to its process group, SIGKILL after a grace
// period.
func (p *replicaProc) stop() {
	if p.cmd.Process == nil {
		return
	}
	if !p.done() {
		_ = signalGroup(p.cmd, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(stopGrace):
			_ = signalGroup(p.cmd, syscall.SIGKILL)
			<-p.exited
		}
	}
	p.logFile.Close()
}

// Close stops everything Start started, replicas first (an embedded etcd
// waits seconds for clients still connected). It may be called again.
func (e *Env) Close() {
	e.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, p := range e.procs {
			wg.Go(p.stop)
		}
		wg.Wait()
		if len(e.procs) > 0 {
			e.logf("stopped the replicas")
		}
		if e.net != nil {
			_ = e.net.Collection.Clear()
		}
		// close is a method value, of a nil store when not running:
		// not called then.
		stop := func(what string, running bool, close func() error) {
			if running {
				if err := close(); err != nil {
					e.logf("stop %s: %v", what, err)
				}
			}
		}
		stop("etcd", e.Etcd != nil, e.Etcd.Close)
		stop("NATS", e.NATS != nil, e.NATS.Close)
		stop("Redis", e.Redis != nil, e.Redis.Close)
		stop("the Redis Cluster", e.Cluster != nil, e.Cluster.Close)
		stop("the redlock servers", true, e.redlock.close)
		stop("MongoDB", e.Mongo != nil, e.Mongo.Close)
		if e.Redis != nil || e.Cluster != nil || e.Mongo != nil || e.Etcd != nil {
			e.logf("stopped the stores")
		}
		if e.tmpDir != "" {
			_ = os.RemoveAll(e.tmpDir)
		}
		if e.storeLog != nil {
			_ = e.storeLog.Close()
		}
	})
}

// redactURI hides a password in a MongoDB URI.
func redactURI(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable URI)"
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// prefixed prefixes each line written to w.
type prefixed struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	mid    bool // the last write ended inside a line
}

func (p *prefixed) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var buf bytes.Buffer
	for _, c := range b {
		if !p.mid {
			buf.WriteString(p.prefix)
		}
		buf.WriteByte(c)
		p.mid = c != '\n'
	}
	if _, err := p.w.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Restart stops replica i if it still runs and starts it again on the same
// port with the same flags, then waits until it is ready.
func (e *Env) Restart(ctx context.Context, i int) error {
	return e.replace(ctx, []int{i}, func(int) []string { return e.procs[i].extra })
}

// Configure makes replica i run with extra flags args[i] (none past the
// end), restarting only the replicas whose flags differ or that are down.
func (e *Env) Configure(ctx context.Context, args [][]string) error {
	want := make([][]string, len(e.procs))
	copy(want, args)
	var which []int
	for i, p := range e.procs {
		if p.done() || !slices.Equal(p.extra, want[i]) {
			which = append(which, i)
		}
	}
	if len(which) == 0 {
		return nil
	}
	return e.replace(ctx, which, func(i int) []string { return want[i] })
}

// replace restarts the replicas at the indexes which with flags extra(i).
func (e *Env) replace(ctx context.Context, which []int, extra func(int) []string) error {
	var started []*replicaProc
	for _, i := range which {
		old := e.procs[i]
		flags := slices.Clone(extra(i))
		old.stop()
		p, err := e.startReplica(old.id, old.port, flags)
		if err != nil {
			return err
		}
		e.mu.Lock()
		e.procs[i] = p
		e.mu.Unlock()
		started = append(started, p)
	}
	return e.waitReady(ctx, started)
}

// Kill kills replica i with SIGKILL, as a crash would, and waits until it
// is gone. It stays down until Restart or Configure.
func (e *Env) Kill(i int) error {
	p := e.procs[i]
	if p.done() {
		return fmt.Errorf("replica %s had already exited (%v); last log lines:\n%s", p.id, p.waitErr, tail(p.logPath, 15))
	}
	if err := signalGroup(p.cmd, syscall.SIGKILL); err != nil {
		return err
	}
	<-p.exited
	return nil
}
