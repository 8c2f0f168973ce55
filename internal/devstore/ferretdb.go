package devstore

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/stocklock/stocklock/internal/storeproc"
)

// ferret is one run of FerretDB, in a devstored process of its own.
type ferret struct {
	addr string // host:port of FerretDB itself, not of the gate
	proc *storeproc.Proc
}

// startFerret runs FerretDB on a free loopback port with its SQLite
// databases in dir, and returns once the port answers. ctx bounds only the
// start-up; the server runs until stop.
func startFerret(ctx context.Context, dir string, logger *slog.Logger) (*ferret, error) {
	p, err := storeproc.Start(ctx, logger, "ferretdb", "-dir", dir)
	if err != nil {
		return nil, fmt.Errorf("devstore: %w", err)
	}
	addrs, err := p.Ready(ctx)
	if err == nil && len(addrs) != 1 {
		err = fmt.Errorf("devstored ferretdb reported %q, want one address", addrs)
	}
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("devstore: %w", err)
	}
	return &ferret{addr: addrs[0], proc: p}, nil
}

// stop shuts FerretDB down and waits for it, which closes every connection
// and the SQLite databases, so the directory can be reopened or removed.
func (f *ferret) stop() { f.proc.Stop() }
