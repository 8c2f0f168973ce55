package devstore

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/stocklock/stocklock/internal/mongogate"
	"github.com/stocklock/stocklock/internal/storeproc"
)

// FerretDB's backends, as reported in Mongo.Backend.
const (
	BackendPostgreSQL = "postgresql"
	BackendSQLite     = "sqlite"
)

// ferretBackend picks the embedded FerretDB's backend: DEVSTORE_FERRETDB
// when set (postgresql or sqlite), otherwise PostgreSQL when its server
// binaries are found (pgBinDir), SQLite when they are not. PostgreSQL writes rows of
// different documents at once; SQLite has one writer per database, and
// its writers wait for each other by sleeping (docs/embedded-store.md).
func ferretBackend() (string, error) {
	switch b := os.Getenv("DEVSTORE_FERRETDB"); b {
	case BackendSQLite:
		return b, nil
	case BackendPostgreSQL:
		if !havePostgres() {
			return "", fmt.Errorf("devstore: DEVSTORE_FERRETDB=postgresql, but postgres or initdb is not on PATH")
		}
		return b, nil
	case "":
		if havePostgres() {
			return BackendPostgreSQL, nil
		}
		return BackendSQLite, nil
	default:
		return "", fmt.Errorf("devstore: DEVSTORE_FERRETDB=%q: want postgresql or sqlite", b)
	}
}

func havePostgres() bool { return pgBinDir() != "" }

// pgBinDir returns the directory of PostgreSQL's postgres and initdb: the
// one on PATH, else Debian's /usr/lib/postgresql/N/bin (which the
// postgresql package does not put on PATH) of the highest N; "" if none.
func pgBinDir() string {
	if p, err := exec.LookPath("postgres"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p)
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		_, err1 := os.Stat(filepath.Join(d, "postgres"))
		_, err2 := os.Stat(filepath.Join(d, "initdb"))
		if err1 == nil && err2 == nil {
			return d
		}
	}
	return ""
}

// ferret is one run of FerretDB, in a devstored process of its own.
type ferret struct {
	addr string // host:port of FerretDB itself, not of the gate
	proc *storeproc.Proc
}

// startFerret runs FerretDB on a free loopback port, on backend: the
// SQLite databases in dir, or the PostgreSQL server at pgAddr. It returns
// once the port answers. ctx bounds only the start-up; the server runs
// until stop.
func startFerret(ctx context.Context, backend, dir, pgAddr string, logger *slog.Logger) (*ferret, error) {
	args := []string{"ferretdb", "-dir", dir}
	if backend == BackendPostgreSQL {
		// pool_max_conns: pgx's default of 4 connections (on 2 cores)
		// would queue FerretDB's writers behind each other. The gate in
		// front forwards at most half as many commands at once, because
		// FerretDB's writes each hold two of them (mongogate.FerretDBPool).
		_, port, err := net.SplitHostPort(pgAddr)
		if err != nil {
			return nil, fmt.Errorf("devstore: PostgreSQL address %q: %w", pgAddr, err)
		}
		// The Unix socket in dir: a shorter round trip than loopback TCP.
		args = []string{"ferretdb", "-postgresql-url", "postgres://postgres@/postgres?host=" + url.QueryEscape(dir) + "&port=" + port + "&pool_max_conns=" + strconv.Itoa(mongogate.FerretDBPool)}
	}
	p, addr, err := startOne(ctx, logger, args...)
	if err != nil {
		return nil, err
	}
	return &ferret{addr: addr, proc: p}, nil
}

// stop shuts FerretDB down and waits for it, which closes every connection
// and the SQLite databases, so the directory can be reopened or removed.
func (f *ferret) stop() { f.proc.Stop() }

// startPostgres runs a private PostgreSQL server from the binaries in bin
// (pgBinDir) with its cluster in dir, in a devstored process, and returns
// it and its host:port.
func startPostgres(ctx context.Context, dir, bin string, logger *slog.Logger) (*storeproc.Proc, string, error) {
	return startOne(ctx, logger, "postgres", "-dir", dir, "-bin", bin)
}

// startOne starts a devstored process that serves one address, and waits
// until it reports it.
func startOne(ctx context.Context, logger *slog.Logger, args ...string) (*storeproc.Proc, string, error) {
	p, err := storeproc.Start(ctx, logger, args...)
	if err != nil {
		return nil, "", fmt.Errorf("devstore: %w", err)
	}
	addrs, err := p.Ready(ctx)
	if err == nil && len(addrs) != 1 {
		err = fmt.Errorf("devstored %s reported %q, want one address", args[0], addrs)
	}
	if err != nil {
		p.Kill()
		return nil, "", fmt.Errorf("devstore: %w", err)
	}
	return p, addrs[0], nil
}
