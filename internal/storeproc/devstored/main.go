// Command devstored runs one embedded store for internal/devstore, in a
// process of its own: FerretDB v1 on SQLite or on PostgreSQL, a private
// PostgreSQL server for it, one etcd member, or a NATS server with
// JetStream. It is started by internal/storeproc, not by hand.
//
//	devstored ferretdb -dir DIR
//	devstored ferretdb -postgresql-url URL
//	devstored postgres -dir DIR
//	devstored etcd -name NAME -dir DIR -client-url URL -peer-url URL \
//	    -initial-cluster NAME=URL,... -state new|existing
//	devstored nats -dir DIR [-port PORT] [-name NAME -cluster HOST:PORT -routes nats://HOST:PORT,...]
//
// Once the store serves, devstored prints one line on stdout: "ready"
// followed by FerretDB's or PostgreSQL's host:port, the member's client and peer
// host:port (the kernel's choice where a URL asks for port 0), or the NATS
// server's client host:port. It stops
// cleanly when its stdin closes or on SIGTERM or SIGINT; SIGKILL is a crash.
//
// DEVSTORED_PPROF=host:port serves net/http/pprof there, to profile the
// store under load (docs/embedded-store.md says how).
//
// The etcd member runs with a 10 ms heartbeat and a 100 ms election timeout
// (its minimum lease TTL is 1 s), compacts to the last 10,000 revisions,
// and fsyncs unless DEVSTORE_ETCD_NO_FSYNC=1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // served only when DEVSTORED_PPROF is set
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "devstored:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: devstored ferretdb|postgres|etcd|nats [flags]")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The parent holds stdin's other end: when it closes it, or dies, the
	// store stops with it.
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if addr := os.Getenv("DEVSTORED_PPROF"); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("DEVSTORED_PPROF: %w", err)
		}
		go func() { _ = http.Serve(ln, nil) }()
	}

	switch args[0] {
	case "ferretdb":
		return runFerretDB(ctx, args[1:])
	case "postgres":
		return runPostgres(ctx, args[1:])
	case "etcd":
		return runEtcd(ctx, args[1:])
	case "nats":
		return runNATS(ctx, args[1:])
	default:
		return fmt.Errorf("unknown subcommand %q: want ferretdb, postgres, etcd or nats", args[0])
	}
}

func runFerretDB(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ferretdb", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory of the SQLite databases")
	pgURL := fs.String("postgresql-url", "", "PostgreSQL URL: FerretDB's PostgreSQL backend instead of SQLite")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*dir == "") == (*pgURL == "") {
		return errors.New("ferretdb: want one of -dir and -postgresql-url")
	}
	handler := "sqlite"
	if *pgURL != "" {
		handler = "postgresql"
	}

	f, err := ferretdb.New(&ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		// At Warn, FerretDB logs every duplicate key reply, which lock
		// contention and idempotency keys produce by design; on
		// PostgreSQL it logs them at Error too (dupKeyFilter).
		Logger:        slog.New(dupKeyFilter{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})}),
		Handler:       handler,
		PostgreSQLURL: *pgURL,
		// A directory, not mode=memory: in-memory SQLite deadlocks on
		// updates, and a directory survives a restart. FerretDB sets WAL
		// mode but leaves synchronous at FULL, an fsync per commit; with
		// NORMAL a commit is durable across a process crash (a devstored
		// restart keeps every acknowledged write) but not a power loss,
		// which a temporary development store need not survive.
		SQLiteURL: "file:" + *dir + "/?_pragma=synchronous(NORMAL)",
	})
	if err != nil {
		return fmt.Errorf("ferretdb.New: %w", err)
	}

	// A FerretDB that is never Run panics when garbage collected, and
	// MongoDBURI may deadlock before Run; so Run comes first, always.
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()

	u, err := url.Parse(f.MongoDBURI())
	if err != nil {
		return fmt.Errorf("FerretDB URI: %w", err)
	}
	if err := waitTCP(ctx, u.Host, done); err != nil {
		return fmt.Errorf("FerretDB on %s: %w", u.Host, err)
	}
	fmt.Println("ready", u.Host)

	// Run returns once ctx ends, with every connection and the SQLite
	// databases closed.
	if err := <-done; err != nil && ctx.Err() == nil {
		return fmt.Errorf("FerretDB: %w", err)
	}
	return nil
}

// runNATS runs a nats-server with JetStream, its streams in files under
// -dir, on -port of loopback (its own choice by default); with -cluster,
// a member named -name of a JetStream cluster listening for routes there,
// routed to the others at -routes.
func runNATS(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("nats", flag.ContinueOnError)
	dir := fs.String("dir", "", "JetStream's storage directory (required)")
	port := fs.Int("port", natsserver.RANDOM_PORT, "client port on 127.0.0.1 (default: the kernel's choice)")
	name := fs.String("name", "", "server name (required with -cluster)")
	cluster := fs.String("cluster", "", "host:port of this member's cluster routes: a JetStream cluster")
	routes := fs.String("routes", "", "comma-separated nats://host:port of every member's routes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("nats: -dir is required")
	}
	opts := &natsserver.Options{
		ServerName: *name, Host: "127.0.0.1", Port: *port, JetStream: true, StoreDir: *dir, NoLog: true, NoSigs: true,
	}
	if *cluster != "" {
		host, cport, err := net.SplitHostPort(*cluster)
		if err != nil || *name == "" {
			return fmt.Errorf("nats: -cluster %q wants host:port and -name", *cluster)
		}
		opts.Cluster.Name, opts.Cluster.Host = "devstore", host
		if opts.Cluster.Port, err = strconv.Atoi(cport); err != nil {
			return fmt.Errorf("nats: -cluster %q: %w", *cluster, err)
		}
		opts.Routes = natsserver.RoutesFromStr(*routes)
	}
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	go srv.Start()
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	if !srv.ReadyForConnections(30 * time.Second) {
		return errors.New("nats: not ready within 30s")
	}
	fmt.Println("ready", srv.Addr().String())
	<-ctx.Done()
	return nil
}

func runEtcd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	var (
		name    = fs.String("name", "", "member name (required)")
		dir     = fs.String("dir", "", "data directory (required)")
		client  = fs.String("client-url", "http://127.0.0.1:0", "client URL to listen on and advertise")
		peer    = fs.String("peer-url", "http://127.0.0.1:0", "peer URL to listen on and advertise")
		initial = fs.String("initial-cluster", "", "NAME=PEER-URL,... of every member (default: this one alone)")
		state   = fs.String("state", embed.ClusterStateFlagNew, "new, or existing for a member started again")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *dir == "" {
		return errors.New("etcd: -name and -dir are required")
	}
	if *state != embed.ClusterStateFlagNew && *state != embed.ClusterStateFlagExisting {
		return fmt.Errorf("etcd: -state %q: want new or existing", *state)
	}
	cu, err := url.Parse(*client)
	if err != nil {
		return fmt.Errorf("etcd: -client-url: %w", err)
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		return fmt.Errorf("etcd: -peer-url: %w", err)
	}
	if *initial == "" {
		*initial = *name + "=" + pu.String()
	}

	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = *initial
	cfg.InitialClusterToken = "devstore"
	cfg.ClusterState = *state
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	// Without compaction a long load run fills the 2 GiB backend quota
	// and the server turns read-only.
	cfg.AutoCompactionMode = embed.CompactorModeRevision
	cfg.AutoCompactionRetention = "10000"
	cfg.UnsafeNoFsync = os.Getenv("DEVSTORE_ETCD_NO_FSYNC") == "1"
	cfg.EnableGRPCGateway = false
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())

	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", *name, err)
	}
	defer func() {
		// HardStop first: Close alone would hand leadership over
		// gracefully and wait for it.
		srv.Server.HardStop()
		srv.Close()
	}()

	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		return fmt.Errorf("etcd member %s: %w", *name, err)
	case <-srv.Server.StopNotify():
		return fmt.Errorf("etcd member %s stopped before it was ready", *name)
	case <-ctx.Done():
		return nil
	}
	fmt.Println("ready", srv.Clients[0].Addr().String(), srv.Peers[0].Addr().String())

	select {
	case <-ctx.Done():
		return nil
	case err := <-srv.Err():
		return fmt.Errorf("etcd member %s: %w", *name, err)
	}
}

// waitTCP waits until addr accepts a connection, ctx ends, the server
// returns (done) or 30 seconds pass.
func waitTCP(ctx context.Context, addr string, done <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("port does not answer: %w (last error: %w)", ctx.Err(), err)
		case err := <-done:
			return fmt.Errorf("server stopped before answering: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dupKeyFilter drops the log records of PostgreSQL's unique violations
// (SQLSTATE 23505): FerretDB answers them as duplicate key errors, which
// its clients expect, yet its query logger reports each as an error.
type dupKeyFilter struct{ slog.Handler }

func (f dupKeyFilter) Handle(ctx context.Context, r slog.Record) error {
	dup := false
	r.Attrs(func(a slog.Attr) bool {
		dup = a.Key == "err" && strings.Contains(a.Value.String(), "SQLSTATE 23505")
		return !dup
	})
	if dup {
		return nil
	}
	return f.Handler.Handle(ctx, r)
}

func (f dupKeyFilter) WithAttrs(as []slog.Attr) slog.Handler {
	return dupKeyFilter{f.Handler.WithAttrs(as)}
}

func (f dupKeyFilter) WithGroup(name string) slog.Handler {
	return dupKeyFilter{f.Handler.WithGroup(name)}
}
