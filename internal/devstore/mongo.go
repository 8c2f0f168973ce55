package devstore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/mongodb"

	"github.com/stocklock/stocklock/internal/mongogate"
	"github.com/stocklock/stocklock/internal/storeproc"
)

// mongoImage is the MongoDB image used when a Docker engine is available.
const mongoImage = "mongo:7"

// Mongo is a running MongoDB server, or FerretDB behind a gate.
type Mongo struct {
	URI     string // mongodb:// URI for clients; for FerretDB, the gate's
	Kind    string // KindExternal, KindTestcontainers or KindFerretDB
	Backend string // FerretDB only: BackendPostgreSQL or BackendSQLite

	logger    *slog.Logger
	container *mongodb.MongoDBContainer

	// ferretdb only. mu guards ferret across Restart and Close.
	gate   *mongogate.Gate
	dir    string
	pg     *storeproc.Proc // the PostgreSQL server, on that backend
	pgAddr string
	mu     sync.Mutex
	ferret *ferret
}

// StartMongo returns the MongoDB at MONGO_URI if that is set; otherwise a
// MongoDB container when a Docker engine answers; otherwise an embedded
// FerretDB on a private PostgreSQL server (or on SQLite, see
// ferretBackend) in a temporary directory, behind a mongogate gate that
// restores single-document atomicity. The caller must Close it. ctx bounds
// only the start-up. A nil logger means slog.Default().
func StartMongo(ctx context.Context, logger *slog.Logger) (*Mongo, error) {
	if logger == nil {
		logger = slog.Default()
	}

	if uri := os.Getenv("MONGO_URI"); uri != "" {
		logger.Info("using external MongoDB")
		return &Mongo{URI: uri, Kind: KindExternal, logger: logger}, nil
	}

	if dockerAnswers(ctx) {
		return startContainer(ctx, logger)
	}

	return startFerretDB(ctx, logger)
}

func startContainer(ctx context.Context, logger *slog.Logger) (*Mongo, error) {
	c, err := mongodb.Run(ctx, mongoImage)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, fmt.Errorf("devstore: start %s container: %w", mongoImage, err)
	}

	uri, err := c.ConnectionString(ctx)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, fmt.Errorf("devstore: %s container URI: %w", mongoImage, err)
	}

	logger.Info("started MongoDB container", slog.String("image", mongoImage))
	return &Mongo{URI: uri, Kind: KindTestcontainers, logger: logger, container: c}, nil
}

func startFerretDB(ctx context.Context, logger *slog.Logger) (*Mongo, error) {
	backend, err := ferretBackend()
	if err != nil {
		return nil, err
	}
	return startFerretDBOn(ctx, logger, backend)
}

func startFerretDBOn(ctx context.Context, logger *slog.Logger, backend string) (*Mongo, error) {
	start := time.Now()
	dir, err := os.MkdirTemp("", "devstore-ferretdb-")
	if err != nil {
		return nil, fmt.Errorf("devstore: FerretDB dir: %w", err)
	}
	m := &Mongo{Kind: KindFerretDB, Backend: backend, logger: logger, dir: dir}
	fail := func(err error) (*Mongo, error) {
		m.stopServers()
		_ = os.RemoveAll(dir)
		return nil, err
	}

	if backend == BackendPostgreSQL {
		m.pg, m.pgAddr, err = startPostgres(ctx, dir, pgBinDir(), logger.With(slog.String("component", "postgres")))
		if err != nil {
			return fail(err)
		}
	}
	m.ferret, err = startFerret(ctx, backend, dir, m.pgAddr, logger.With(slog.String("component", "ferretdb")))
	if err != nil {
		return fail(err)
	}

	m.gate, err = mongogate.Start(m.ferret.addr, logger, mongogate.Options{})
	if err != nil {
		return fail(fmt.Errorf("devstore: %w", err))
	}
	m.URI = "mongodb://" + m.gate.Addr() + "/"

	logger.Info("started embedded FerretDB behind mongogate (no Docker engine, MONGO_URI unset)",
		slog.String("backend", backend), slog.String("gate", m.gate.Addr()), slog.String("ferretdb", m.ferret.addr),
		slog.Duration("took", time.Since(start)))
	return m, nil
}

// stopServers stops FerretDB, then its PostgreSQL server; m.mu must be
// held, or m not yet shared.
func (m *Mongo) stopServers() {
	if m.ferret != nil {
		m.ferret.stop()
		m.ferret = nil
	}
	if m.pg != nil {
		m.pg.Stop()
		m.pg = nil
	}
}

// Restart stops FerretDB and starts it again on the same data, keeping URI
// valid: the gate sends new connections to the new FerretDB. Connections open
// at the time are cut, as in a server crash, and the driver reconnects.
// Acknowledged writes survive. It returns ErrCannotRestart for other kinds.
func (m *Mongo) Restart(ctx context.Context) error {
	if m.Kind != KindFerretDB {
		return fmt.Errorf("restart %s MongoDB: %w", m.Kind, ErrCannotRestart)
	}

	m.mu.Lock()
	defer m.mu.Unlock()

	if m.ferret == nil {
		return fmt.Errorf("devstore: restart FerretDB: already closed")
	}
	// Tell FerretDB to stop, then cut the gate's connections: FerretDB
	// would otherwise wait 3 seconds for its clients to leave. (With the
	// gate pointed nowhere meanwhile, pkg/inventory's restart test once saw
	// no pooled connection fail, which a crash must show.)
	m.ferret.proc.Shutdown()
	m.gate.CloseConns()
	m.ferret.stop()
	m.ferret = nil

	f, err := startFerret(ctx, m.Backend, m.dir, m.pgAddr, m.logger.With(slog.String("component", "ferretdb")))
	if err != nil {
		return fmt.Errorf("devstore: restart FerretDB: %w", err)
	}
	m.ferret = f
	m.gate.SetUpstream(f.addr)

	m.logger.Info("restarted FerretDB", slog.String("ferretdb", f.addr))
	return nil
}

// GateStats reports what the gate in front of the embedded FerretDB has
// done and holds now; ok is false for other kinds, which have no gate.
func (m *Mongo) GateStats() (s mongogate.Stats, ok bool) {
	if m.gate == nil {
		return mongogate.Stats{}, false
	}
	return m.gate.Stats(), true
}

// Close stops a server started by StartMongo and removes its data. It leaves
// an external server alone.
func (m *Mongo) Close() error {
	switch m.Kind {
	case KindTestcontainers:
		if err := testcontainers.TerminateContainer(m.container); err != nil {
			return fmt.Errorf("devstore: terminate MongoDB container: %w", err)
		}
	case KindFerretDB:
		m.mu.Lock()
		defer m.mu.Unlock()

		// Gate first: clients go away before the server they talk to.
		err := m.gate.Close()
		m.stopServers()
		if rmErr := os.RemoveAll(m.dir); rmErr != nil && err == nil {
			err = rmErr
		}
		if err != nil {
			return fmt.Errorf("devstore: close FerretDB: %w", err)
		}
	}
	return nil
}
