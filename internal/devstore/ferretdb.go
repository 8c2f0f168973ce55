package devstore

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// ferretNewMu serializes ferretdb.New, which writes a package-level variable
// of FerretDB (version.Get().Package): two Mongos starting at once in
// parallel tests would otherwise be a data race.
var ferretNewMu sync.Mutex

// ferret is one run of an embedded FerretDB.
type ferret struct {
	addr   string // host:port of FerretDB itself, not of the gate
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned and SQLite is closed
}

// startFerret runs FerretDB on a free loopback port with its SQLite
// databases in dir, and returns once the port answers. ctx bounds only the
// start-up; the server runs until stop.
func startFerret(ctx context.Context, dir string, logger *slog.Logger) (*ferret, error) {
	ferretNewMu.Lock()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener: ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		// At Warn, FerretDB logs every duplicate key reply, which lock
		// contention produces by design.
		Logger:  slog.New(minLevel{Handler: logger.Handler(), min: slog.LevelError}),
		Handler: "sqlite",
		// A directory, not mode=memory: in-memory SQLite deadlocks on
		// updates, and a directory survives a Restart.
		SQLiteURL: "file:" + dir + "/",
	})
	ferretNewMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("devstore: ferretdb.New: %w", err)
	}

	// A FerretDB that is never Run panics when garbage collected, and
	// MongoDBURI may deadlock before Run; so Run comes first, always.
	runCtx, cancel := context.WithCancel(context.Background())
	fr := &ferret{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(fr.done)
		_ = f.Run(runCtx)
	}()

	u, err := url.Parse(f.MongoDBURI())
	if err != nil {
		fr.stop()
		return nil, fmt.Errorf("devstore: FerretDB URI: %w", err)
	}
	fr.addr = u.Host

	if err := waitTCP(ctx, fr.addr, fr.done); err != nil {
		fr.stop()
		return nil, fmt.Errorf("devstore: FerretDB on %s: %w", fr.addr, err)
	}
	return fr, nil
}

// stop cancels Run and waits for it to return, which closes every connection
// and the SQLite databases, so the directory can be reopened or removed.
func (f *ferret) stop() {
	f.cancel()
	<-f.done
}

// waitTCP waits until addr accepts a connection, ctx is done, stopped is
// closed or 30 seconds pass.
func waitTCP(ctx context.Context, addr string, stopped <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}

		select {
		case <-ctx.Done():
			return fmt.Errorf("port does not answer: %w (last error: %w)", ctx.Err(), err)
		case <-stopped:
			return fmt.Errorf("server stopped before answering")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// minLevel drops records below min before they reach Handler.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}
