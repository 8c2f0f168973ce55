package devstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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
// loopback port; or a JetStream cluster of such servers (StartNATSCluster).
type NATS struct {
	URL  string // such as nats://127.0.0.1:4222; a cluster's servers comma-separated
	Kind string // KindExternal or KindEmbeddedNATS

	logger *slog.Logger
	dir    string // embedded only: one storage directory per member

	mu      sync.Mutex // guards members' processes (Kill and Start)
	members []*natsMember
	closed  bool
}

// natsMember is one embedded server. Its ports are fixed at the first
// start, so that a server started again is at the URL its clients have.
type natsMember struct {
	name, dir string
	client    string          // host:port
	cluster   string          // host:port of its routes; "" for a lone server
	routes    string          // every member's routes, for -routes
	proc      *storeproc.Proc // nil while killed
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
	return startEmbeddedNATS(ctx, logger, 1)
}

// StartNATSCluster starts a JetStream cluster of n embedded servers on
// loopback (n >= 3: JetStream's meta group needs a quorum that survives a
// member's loss), for the drills that kill a stream's leader: see
// StreamLeader, Kill and Start. It ignores NATS_URL. The caller must Close it.
func StartNATSCluster(ctx context.Context, logger *slog.Logger, n int) (*NATS, error) {
	if n < 3 {
		return nil, fmt.Errorf("devstore: a NATS cluster of %d servers: want at least 3", n)
	}
	if logger == nil {
		logger = slog.Default()
	}
	return startEmbeddedNATS(ctx, logger, n)
}

func startEmbeddedNATS(ctx context.Context, logger *slog.Logger, n int) (*NATS, error) {
	dir, err := os.MkdirTemp("", "devstore-nats-*")
	if err != nil {
		return nil, fmt.Errorf("devstore: nats: %w", err)
	}
	// A lone server binds port 0 and is pinned to the port it got; the
	// members of a cluster must know each other's route ports before
	// they start, so those (and their client ports) were free a moment
	// ago, and the start is tried again if another process took one.
	for attempt := 1; ; attempt++ {
		var ns *NATS
		if ns, err = tryStartNATS(ctx, logger, dir, n); err == nil {
			logger.Info("started embedded NATS with JetStream", slog.String("url", ns.URL), slog.Int("servers", n))
			return ns, nil
		}
		if n == 1 || attempt == 3 || ctx.Err() != nil {
			break
		}
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

func tryStartNATS(ctx context.Context, logger *slog.Logger, dir string, n int) (*NATS, error) {
	ns := &NATS{Kind: KindEmbeddedNATS, logger: logger, dir: dir}
	var routes []string
	for i := range n {
		m := &natsMember{name: "n" + strconv.Itoa(i), dir: filepath.Join(dir, "n"+strconv.Itoa(i))}
		if n > 1 {
			var err error
			if m.client, err = freeAddr(); err != nil {
				return nil, err
			}
			if m.cluster, err = freeAddr(); err != nil {
				return nil, err
			}
			routes = append(routes, "nats://"+m.cluster)
		}
		ns.members = append(ns.members, m)
	}
	for _, m := range ns.members {
		m.routes = strings.Join(routes, ",")
	}
	// Every member starts before any is waited for: a cluster's
	// JetStream is ready once its members have met.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ns.members {
		wg.Go(func() { errs[i] = ns.startMember(ctx, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		ns.killAll()
		return nil, err
	}
	var urls []string
	for _, m := range ns.members {
		urls = append(urls, "nats://"+m.client)
	}
	ns.URL = strings.Join(urls, ",")
	if err := waitJetStream(ctx, ns.URL); err != nil {
		ns.killAll()
		return nil, fmt.Errorf("devstore: nats: %w", err)
	}
	return ns, nil
}

// startMember starts member i (stopped or new) and waits until it serves.
func (n *NATS) startMember(ctx context.Context, i int) error {
	m := n.members[i]
	port := "-1"
	if m.client != "" {
		_, port, _ = net.SplitHostPort(m.client)
	}
	args := []string{"nats", "-dir", m.dir, "-port", port}
	if m.cluster != "" {
		args = append(args, "-name", m.name, "-cluster", m.cluster, "-routes", m.routes)
	}
	p, err := storeproc.Start(ctx, n.logger, args...)
	if err != nil {
		return fmt.Errorf("devstore: start nats %s: %w", m.name, err)
	}
	addrs, err := p.Ready(ctx)
	if err == nil && len(addrs) != 1 {
		err = fmt.Errorf("reported %q, want its client address", addrs)
	}
	if err != nil {
		p.Kill()
		return fmt.Errorf("devstore: nats %s: %w", m.name, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		p.Kill()
		return fmt.Errorf("devstore: nats %s: closed meanwhile", m.name)
	}
	m.client, m.proc = addrs[0], p
	return nil
}

// Servers is how many servers an embedded NATS runs (0 for an external one).
func (n *NATS) Servers() int { return len(n.members) }

// Kill ends server i's process with SIGKILL, as in a crash: its clients'
// connections are cut, its files stay (what JetStream had written to them
// survives, a memory stream does not), for Start. It is a no-op for a
// server already killed, and returns ErrCannotRestart for an external one.
func (n *NATS) Kill(i int) error {
	if n.Kind != KindEmbeddedNATS {
		return fmt.Errorf("kill %s NATS: %w", n.Kind, ErrCannotRestart)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if i < 0 || i >= len(n.members) {
		return fmt.Errorf("devstore: no NATS server %d", i)
	}
	if m := n.members[i]; m.proc != nil {
		m.proc.Kill()
		m.proc = nil
	}
	return nil
}

// Start starts server i again after Kill, on its files and at its port,
// and waits until it serves. It is a no-op for a running server and
// returns ErrCannotRestart for an external one.
func (n *NATS) Start(ctx context.Context, i int) error {
	if n.Kind != KindEmbeddedNATS {
		return fmt.Errorf("start %s NATS: %w", n.Kind, ErrCannotRestart)
	}
	if i < 0 || i >= len(n.members) {
		return fmt.Errorf("devstore: no NATS server %d", i)
	}
	n.mu.Lock()
	running := n.members[i].proc != nil
	n.mu.Unlock()
	if running {
		return nil
	}
	return n.startMember(ctx, i)
}

// StreamLeader returns the index of the server that leads stream (a lone
// server leads every stream), or ErrCannotRestart for an external NATS.
func (n *NATS) StreamLeader(ctx context.Context, stream string) (int, error) {
	if n.Kind != KindEmbeddedNATS {
		return -1, fmt.Errorf("leader of %s NATS: %w", n.Kind, ErrCannotRestart)
	}
	if len(n.members) == 1 {
		return 0, nil
	}
	nc, err := nats.Connect(n.URL, nats.Timeout(5*time.Second))
	if err != nil {
		return -1, fmt.Errorf("devstore: nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return -1, fmt.Errorf("devstore: nats: %w", err)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return -1, fmt.Errorf("devstore: stream %s: %w", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return -1, fmt.Errorf("devstore: stream %s has no leader now", stream)
	}
	i := slices.IndexFunc(n.members, func(m *natsMember) bool { return m.name == info.Cluster.Leader })
	if i < 0 {
		return -1, fmt.Errorf("devstore: stream %s is led by %q, not one of ours", stream, info.Cluster.Leader)
	}
	return i, nil
}

// Close stops an embedded server (or cluster) and removes its storage; it
// leaves an external one alone.
func (n *NATS) Close() error {
	if n.Kind != KindEmbeddedNATS {
		return nil
	}
	n.mu.Lock()
	n.closed = true
	var wg sync.WaitGroup
	for _, m := range n.members {
		if p := m.proc; p != nil {
			m.proc = nil
			wg.Go(p.Stop)
		}
	}
	n.mu.Unlock()
	wg.Wait()
	return os.RemoveAll(n.dir)
}

// killAll kills every running member (a start that failed).
func (n *NATS) killAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.members {
		if m.proc != nil {
			m.proc.Kill()
			m.proc = nil
		}
	}
}

// waitJetStream connects to url and asks JetStream for its account, the
// call that fails on a server without JetStream (and on a cluster whose
// JetStream has no leader yet), for up to 30 s.
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
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		// Each ask has its own bound: a cluster without a meta leader
		// yet does not answer at all.
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return err // a cluster's meta group still electing is worth the wait, no JetStream is not
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("JetStream: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
