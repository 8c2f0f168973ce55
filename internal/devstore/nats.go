package devstore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/stocklock/stocklock/internal/storeproc"
)

// KindEmbeddedNATS is the Kind of a NATS server with JetStream that
// devstore runs in a devstored process (github.com/nats-io/nats-server/v2).
const KindEmbeddedNATS = "embedded-nats"

// NATS is a running NATS server with JetStream: the one at NATS_URL, or a
// real nats-server in a devstored process (internal/storeproc) on a
// loopback port.
type NATS struct {
	URL  string // such as nats://127.0.0.1:4222
	Kind string // KindExternal or KindEmbeddedNATS

	proc *storeproc.Proc // embedded only
	dir  string          // embedded only: JetStream's file storage
}

// StartNATS returns the NATS server at NATS_URL if that is set and answers
// with JetStream enabled; otherwise a nats-server in a devstored process,
// JetStream on, its streams in files under a temporary directory
// (file storage, as production wants: a restart keeps them), listening on
// a port of its own choosing on 127.0.0.1. The caller must Close it. ctx
// bounds only the start-up. A nil logger means slog.Default().
func StartNATS(ctx context.Context, logger *slog.Logger) (*NATS, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if u := os.Getenv("NATS_URL"); u != "" {
		if err := waitJetStream(ctx, u); err != nil {
			return nil, fmt.Errorf("devstore: NATS_URL=%s: %w", u, err)
		}
		logger.Info("using external NATS", slog.String("url", u))
		return &NATS{URL: u, Kind: KindExternal}, nil
	}
	dir, err := os.MkdirTemp("", "devstore-nats-*")
	if err != nil {
		return nil, fmt.Errorf("devstore: nats: %w", err)
	}
	p, err := storeproc.Start(ctx, logger, "nats", "-dir", dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("devstore: start nats: %w", err)
	}
	addrs, err := p.Ready(ctx)
	if err == nil && len(addrs) != 1 {
		err = fmt.Errorf("reported %q, want its client address", addrs)
	}
	if err != nil {
		p.Kill()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("devstore: nats: %w", err)
	}
	n := &NATS{URL: "nats://" + addrs[0], Kind: KindEmbeddedNATS, proc: p, dir: dir}
	logger.Info("started embedded NATS with JetStream", slog.String("url", n.URL))
	return n, nil
}

// Close stops an embedded server and removes its storage; it leaves an
// external one alone.
func (n *NATS) Close() error {
	if n.proc == nil {
		return nil
	}
	n.proc.Stop()
	return os.RemoveAll(n.dir)
}

// waitJetStream connects to url and asks JetStream for its account, the
// call that fails on a server without JetStream.
func waitJetStream(ctx context.Context, url string) error {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}
	return nil
}
