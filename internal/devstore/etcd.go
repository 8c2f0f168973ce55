package devstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/stocklock/stocklock/internal/storeproc"
)

// KindEmbeddedEtcd is the Kind of an etcd server (or cluster) that devstore
// runs in devstored processes.
const KindEmbeddedEtcd = "embedded-etcd"

// Etcd is a running etcd: the cluster at ETCD_ENDPOINTS, or members of an
// etcd server v3 (go.etcd.io/etcd/server/v3/embed) on loopback ports, each
// in a devstored process (internal/storeproc).
type Etcd struct {
	Endpoints []string // client URLs, such as http://127.0.0.1:2379
	Kind      string   // KindExternal or KindEmbeddedEtcd

	logger *slog.Logger
	dir    string // embedded only: holds one data directory per member

	// mu guards members (their servers come and go with Kill and Start)
	// and clients.
	mu      sync.Mutex
	members []*etcdMember
	status  *clientv3.Client // asks each member who leads; embedded only
	clients []*clientv3.Client
	closed  bool
}

// etcdMember is one embedded member. Its URLs are fixed at the first start,
// so that a restarted member rejoins under the same identity.
type etcdMember struct {
	name, dir          string
	clientURL, peerURL url.URL
	proc               *storeproc.Proc // nil while killed
}

// StartEtcd returns the etcd at ETCD_ENDPOINTS (comma-separated client URLs)
// if that is set and answers; otherwise a single-member embedded etcd server
// in a devstored process, with its data in a temporary directory and its
// client and peer ports picked by the kernel on 127.0.0.1. The caller must Close it.
// ctx bounds only the start-up. A nil logger means slog.Default().
//
// The embedded server fsyncs like a real one (set DEVSTORE_ETCD_NO_FSYNC=1
// to skip it, which is several times faster on a slow disk and loses data on
// a machine crash), compacts itself to the last 10,000 revisions, and runs
// with a 10 ms heartbeat and 100 ms election timeout (see devstored): its
// minimum lease TTL is 1 s (2 s at etcd's defaults), and a fresh member is
// ready in about 0.1 s.
func StartEtcd(ctx context.Context, logger *slog.Logger) (*Etcd, error) {
	if logger == nil {
		logger = slog.Default()
	}

	if eps := os.Getenv("ETCD_ENDPOINTS"); eps != "" {
		e := &Etcd{Kind: KindExternal, logger: logger}
		for ep := range strings.SplitSeq(eps, ",") {
			if ep = strings.TrimSpace(ep); ep != "" {
				e.Endpoints = append(e.Endpoints, ep)
			}
		}
		if err := waitEtcd(ctx, e.Endpoints); err != nil {
			return nil, fmt.Errorf("devstore: ETCD_ENDPOINTS=%s: %w", eps, err)
		}
		logger.Info("using external etcd", slog.Any("endpoints", e.Endpoints))
		return e, nil
	}

	return startEmbeddedEtcd(ctx, logger, 1)
}

// StartEtcdCluster starts an embedded etcd cluster of n members (n >= 1) on
// loopback, for fault tests that kill members: see Leader, Kill and Start.
// It ignores ETCD_ENDPOINTS. The caller must Close it.
func StartEtcdCluster(ctx context.Context, logger *slog.Logger, n int) (*Etcd, error) {
	if n < 1 {
		return nil, fmt.Errorf("devstore: etcd cluster of %d members", n)
	}
	if logger == nil {
		logger = slog.Default()
	}
	return startEmbeddedEtcd(ctx, logger, n)
}

func startEmbeddedEtcd(ctx context.Context, logger *slog.Logger, n int) (*Etcd, error) {
	start := time.Now()
	dir, err := os.MkdirTemp("", "devstore-etcd-")
	if err != nil {
		return nil, fmt.Errorf("devstore: etcd dir: %w", err)
	}

	// A single member binds port 0 and learns its ports afterwards. The
	// members of a cluster must know each other's peer URLs before they
	// start, so those get ports that were free a moment ago, and the start
	// is tried again if another process took one in between.
	for attempt := 1; ; attempt++ {
		var e *Etcd
		e, err = tryStartEtcd(ctx, logger, dir, n)
		if err == nil {
			logger.Info("started embedded etcd",
				slog.Any("endpoints", e.Endpoints), slog.Int("members", n), slog.Duration("took", time.Since(start)))
			return e, nil
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

func tryStartEtcd(ctx context.Context, logger *slog.Logger, dir string, n int) (*Etcd, error) {
	e := &Etcd{Kind: KindEmbeddedEtcd, logger: logger, dir: dir}
	var initial []string
	for i := range n {
		m := &etcdMember{name: fmt.Sprintf("m%d", i)}
		m.dir = filepath.Join(dir, m.name)
		m.clientURL, m.peerURL = url.URL{Scheme: "http", Host: "127.0.0.1:0"}, url.URL{Scheme: "http", Host: "127.0.0.1:0"}
		if n > 1 {
			for _, u := range []*url.URL{&m.clientURL, &m.peerURL} {
				addr, err := freeAddr()
				if err != nil {
					return nil, err
				}
				u.Host = addr
			}
		}
		initial = append(initial, m.name+"="+m.peerURL.String())
		e.members = append(e.members, m)
	}

	// Start every member before waiting for any: a member of a cluster is
	// ready only once a quorum has started.
	for _, m := range e.members {
		p, err := storeproc.Start(ctx, logger, memberArgs(m, strings.Join(initial, ","), "new")...)
		if err != nil {
			e.closeMembers()
			return nil, fmt.Errorf("devstore: start etcd member %s: %w", m.name, err)
		}
		m.proc = p
	}
	// Wait for all at once: a member that exits (another process took a
	// port chosen for it) fails the start at once, not after the ready
	// timeout of a member that waits for it to form a quorum.
	readyCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	addrs := make([][]string, n)
	var wg sync.WaitGroup
	for i, m := range e.members {
		wg.Go(func() {
			a, err := m.proc.Ready(readyCtx)
			if err == nil && len(a) != 2 {
				err = fmt.Errorf("reported %q, want client and peer addresses", a)
			}
			if err != nil {
				cancel(fmt.Errorf("devstore: etcd member %s: %w", m.name, err))
				return
			}
			addrs[i] = a
		})
	}
	wg.Wait()
	if err := context.Cause(readyCtx); err != nil {
		e.closeMembers()
		return nil, err
	}
	for i, m := range e.members {
		// Pin the ports the kernel chose, for Start after Kill.
		m.clientURL.Host, m.peerURL.Host = addrs[i][0], addrs[i][1]
		e.Endpoints = append(e.Endpoints, m.clientURL.String())
	}
	status, err := clientv3.New(clientConfig(e.Endpoints))
	if err != nil {
		e.closeMembers()
		return nil, fmt.Errorf("devstore: etcd client: %w", err)
	}
	e.status = status
	return e, nil
}

// memberArgs are devstored's arguments for member m.
func memberArgs(m *etcdMember, initialCluster, state string) []string {
	return []string{"etcd", "-name", m.name, "-dir", m.dir,
		"-client-url", m.clientURL.String(), "-peer-url", m.peerURL.String(),
		"-initial-cluster", initialCluster, "-state", state}
}

// waitEtcd checks that the cluster at endpoints answers a read within 10 s.
func waitEtcd(ctx context.Context, endpoints []string) error {
	if len(endpoints) == 0 {
		return errors.New("no endpoints")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := clientv3.New(clientConfig(endpoints))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Get(ctx, "devstore-ping")
	return err
}

func clientConfig(endpoints []string) clientv3.Config {
	return clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
}

// Client returns a new client of every member, with a quiet logger. Close
// closes it, before it stops the servers (an embedded server otherwise
// waits several seconds for the client's streams to end); the caller may
// close it earlier.
func (e *Etcd) Client() (*clientv3.Client, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("devstore: etcd is closed")
	}
	c, err := clientv3.New(clientConfig(e.Endpoints))
	if err != nil {
		return nil, fmt.Errorf("devstore: etcd client: %w", err)
	}
	e.clients = append(e.clients, c)
	return c, nil
}

// Leader returns the index in Endpoints of the current leader of an
// embedded cluster, asking each running member whether it leads (a second
// at most each), or -1 if none says so. It returns ErrCannotRestart for an external cluster.
func (e *Etcd) Leader() (int, error) {
	if e.Kind != KindEmbeddedEtcd {
		return -1, fmt.Errorf("leader of %s etcd: %w", e.Kind, ErrCannotRestart)
	}
	e.mu.Lock()
	var running []int
	for i, m := range e.members {
		if m.proc != nil {
			running = append(running, i)
		}
	}
	e.mu.Unlock()

	for _, i := range running {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := e.status.Status(ctx, e.Endpoints[i])
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return i, nil
		}
	}
	return -1, nil
}

// Kill ends member i's process with SIGKILL, as in a crash: no leadership
// transfer, and its clients' connections are cut. Its data stays, for Start. It is a
// no-op for a member already killed, and returns ErrCannotRestart for an
// external cluster.
func (e *Etcd) Kill(i int) error {
	if e.Kind != KindEmbeddedEtcd {
		return fmt.Errorf("kill %s etcd: %w", e.Kind, ErrCannotRestart)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if i < 0 || i >= len(e.members) {
		return fmt.Errorf("devstore: no etcd member %d", i)
	}
	m := e.members[i]
	if m.proc != nil {
		m.proc.Kill()
		m.proc = nil
	}
	return nil
}

// Start starts member i again after Kill, on its old data and ports, and
// waits until it serves clients (for a cluster member, until it has
// rejoined a quorum). It is a no-op for a running member and returns
// ErrCannotRestart for an external cluster. Do not start one member from
// two goroutines at once.
func (e *Etcd) Start(ctx context.Context, i int) error {
	if e.Kind != KindEmbeddedEtcd {
		return fmt.Errorf("start %s etcd: %w", e.Kind, ErrCannotRestart)
	}
	if i < 0 || i >= len(e.members) {
		return fmt.Errorf("devstore: no etcd member %d", i)
	}
	e.mu.Lock()
	running := e.members[i].proc != nil
	e.mu.Unlock()
	if running {
		return nil
	}
	return e.startMember(ctx, i)
}

// Restart kills every member and starts them again on their data, as in a
// crash of the whole cluster. Acknowledged writes survive, and so do leases
// (with their TTL counted again from the restart). It returns
// ErrCannotRestart for an external cluster.
func (e *Etcd) Restart(ctx context.Context) error {
	if e.Kind != KindEmbeddedEtcd {
		return fmt.Errorf("restart %s etcd: %w", e.Kind, ErrCannotRestart)
	}
	for i := range e.members {
		if err := e.Kill(i); err != nil {
			return err
		}
	}
	// Start the members concurrently: each waits for a quorum.
	errs := make([]error, len(e.members))
	var wg sync.WaitGroup
	for i := range e.members {
		wg.Go(func() { errs[i] = e.startMember(ctx, i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startMember starts the stopped member i. It does not hold mu across the
// wait, so that the members of a cluster can wait for each other.
func (e *Etcd) startMember(ctx context.Context, i int) error {
	e.mu.Lock()
	m := e.members[i]
	var initial []string
	for _, o := range e.members {
		initial = append(initial, o.name+"="+o.peerURL.String())
	}
	e.mu.Unlock()

	p, err := storeproc.Start(ctx, e.logger, memberArgs(m, strings.Join(initial, ","), "existing")...)
	if err != nil {
		return fmt.Errorf("devstore: restart etcd member %s: %w", m.name, err)
	}
	if _, err := p.Ready(ctx); err != nil {
		p.Kill()
		return fmt.Errorf("devstore: restart etcd member %s: %w", m.name, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		p.Kill()
		return fmt.Errorf("devstore: restart etcd member %s: etcd closed meanwhile", m.name)
	}
	m.proc = p
	return nil
}

// Close closes the clients made by Client, then stops the embedded members
// and removes their data. It leaves an external cluster alone.
func (e *Etcd) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	clients := e.clients
	e.clients = nil
	if e.status != nil {
		clients = append(clients, e.status)
	}
	e.mu.Unlock()

	for _, c := range clients {
		_ = c.Close() // a second Close of a client is harmless
	}
	if e.Kind != KindEmbeddedEtcd {
		return nil
	}

	e.mu.Lock()
	e.closeMembers()
	e.mu.Unlock()
	if err := os.RemoveAll(e.dir); err != nil {
		return fmt.Errorf("devstore: remove etcd dir: %w", err)
	}
	return nil
}

// closeMembers kills every running member, all at once: their data is
// about to be removed, and a member stopping cleanly alone would first wait
// to hand its leadership over.
func (e *Etcd) closeMembers() {
	var wg sync.WaitGroup
	for _, m := range e.members {
		if m.proc == nil {
			continue
		}
		p := m.proc
		m.proc = nil
		wg.Go(p.Kill)
	}
	wg.Wait()
}
