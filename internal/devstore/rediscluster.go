package devstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Topology and timing of a RedisCluster that devstore starts: three masters
// with one replica each. clusterNodeTimeout is how long a master may be
// unreachable before its replica is promoted: short, so that a kill fails
// over in a few seconds, but long enough that a busy two-core machine does
// not fail over a master that is merely slow.
const (
	clusterMasters     = 3
	clusterReplicas    = 1
	clusterNodeTimeout = 2000 // milliseconds
)

// Errors of a RedisCluster.
var (
	// ErrNoRedisServer is returned by StartRedisCluster when neither
	// REDIS_CLUSTER_ADDRS nor redis-server and redis-cli on PATH are there,
	// and by StartRedisClock and StartRedisServers without redis-server.
	ErrNoRedisServer = errors.New("devstore: no redis-server (or, for a cluster, redis-cli) on PATH")
	// ErrUnknownNode is returned for an address that is not a node of the
	// cluster.
	ErrUnknownNode = errors.New("devstore: not a node of this cluster")
	// ErrNoReplica is returned by Failover for a master without a replica
	// that is up.
	ErrNoReplica = errors.New("devstore: master has no replica that is up")
)

// RedisCluster is a running Redis Cluster: the one at REDIS_CLUSTER_ADDRS, or
// six redis-server processes on free loopback ports that devstore started
// and joined with redis-cli --cluster create.
type RedisCluster struct {
	// Addrs holds the address of every node devstore started (masters
	// first, as created), or the addresses of REDIS_CLUSTER_ADDRS. Roles
	// change with failovers: ask Masters and Replica.
	Addrs []string
	Kind  string // KindExternal or KindRedisServer

	logger *slog.Logger
	bin    string // redis-server
	dir    string

	mu     sync.Mutex // guards nodes' processes
	nodes  []*clusterNode
	closed bool
}

// clusterNode is one redis-server of a cluster devstore started. Its ports
// and its nodes.conf are kept across Kill and StartNode, so that a restarted
// node rejoins under the same identity (without data: nothing else is
// persisted).
type clusterNode struct {
	addr    string
	busPort string
	dir     string
	proc    *redisProcess // nil while down
}

// StartRedisCluster returns the cluster at REDIS_CLUSTER_ADDRS
// (comma-separated host:port of some of its nodes) if that is set and every
// listed node reports cluster_state:ok; otherwise it starts three masters
// and three replicas with redis-server from PATH, on free loopback ports,
// without persistence, and waits until every node reports cluster_state:ok
// and knows all six. It returns ErrNoRedisServer when neither is available.
// The caller must Close it. ctx bounds only the start-up. A nil logger means
// slog.Default().
func StartRedisCluster(ctx context.Context, logger *slog.Logger) (*RedisCluster, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if env := os.Getenv("REDIS_CLUSTER_ADDRS"); env != "" {
		c := &RedisCluster{Kind: KindExternal, logger: logger}
		for a := range strings.SplitSeq(env, ",") {
			if a = strings.TrimSpace(a); a != "" {
				c.Addrs = append(c.Addrs, a)
			}
		}
		if err := c.WaitOK(ctx); err != nil {
			return nil, fmt.Errorf("devstore: REDIS_CLUSTER_ADDRS=%s: %w", env, err)
		}
		logger.Info("using external Redis Cluster", slog.Any("addrs", c.Addrs))
		return c, nil
	}

	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	dir, err := os.MkdirTemp("", "devstore-rediscluster-")
	if err != nil {
		return nil, fmt.Errorf("devstore: redis cluster dir: %w", err)
	}
	c := &RedisCluster{Kind: KindRedisServer, logger: logger, bin: bin, dir: dir}
	start := time.Now()
	if err := c.create(ctx, cli); err != nil {
		_ = c.Close()
		return nil, err
	}
	logger.Info("started Redis Cluster", slog.Any("addrs", c.Addrs), slog.Duration("took", time.Since(start)))
	return c, nil
}

// create starts the nodes and joins them. A node whose port another process
// took in the meantime gets a new one.
func (c *RedisCluster) create(ctx context.Context, cli string) error {
	n := clusterMasters * (1 + clusterReplicas)
	for i := range n {
		node := &clusterNode{dir: filepath.Join(c.dir, fmt.Sprintf("n%d", i))}
		if err := os.MkdirAll(node.dir, 0o700); err != nil {
			return fmt.Errorf("devstore: redis cluster node dir: %w", err)
		}
		var err error
		for attempt := 1; attempt <= 3; attempt++ {
			if err = node.pickPorts(); err != nil {
				return err
			}
			if err = c.startNode(ctx, node); err == nil || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, node)
		c.Addrs = append(c.Addrs, node.addr)
	}

	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", fmt.Sprint(clusterReplicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("devstore: redis-cli --cluster create: %w: %s", err, lastLines(string(out), 3))
	}
	return c.WaitOK(ctx)
}

func (n *clusterNode) pickPorts() error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	bus, err := freeAddr()
	if err != nil {
		return err
	}
	n.addr = addr
	_, n.busPort, _ = net.SplitHostPort(bus)
	return nil
}

// startNode starts node's redis-server and waits until it answers PING.
// A node killed and started again comes back empty (nothing on disk), and
// rejoins as a replica of whoever took its slots.
func (c *RedisCluster) startNode(ctx context.Context, node *clusterNode) error {
	p, err := startRedisProcess(ctx, c.bin, node.addr, node.dir, nil,
		"--cluster-enabled", "yes",
		"--cluster-port", node.busPort,
		"--cluster-config-file", filepath.Join(node.dir, "nodes.conf"),
		"--cluster-node-timeout", fmt.Sprint(clusterNodeTimeout),
		// A replica may always be promoted, however long it was cut off:
		// a drill must not end in a cluster that cannot fail over.
		"--cluster-replica-validity-factor", "0",
	)
	if err != nil {
		return err
	}
	node.proc = p
	return nil
}

// client returns a plain client of one node, without retries: control
// commands must report a node that is down, not wait for it.
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
}

// WaitOK waits until every node that is up (every address of an external
// cluster) reports cluster_state:ok and agrees on which nodes are masters,
// or ctx ends, or 30 seconds pass.
func (c *RedisCluster) WaitOK(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := c.checkOK(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devstore: redis cluster not ok: %w (last: %w)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *RedisCluster) checkOK(ctx context.Context) error {
	var want []string
	for _, addr := range c.upAddrs() {
		nc := nodeClient(addr)
		info, err := nc.ClusterInfo(ctx).Result()
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = fmt.Errorf("%s: cluster_state not ok", addr)
		}
		var nodes []clusterNodeInfo
		if err == nil {
			nodes, err = clusterNodes(ctx, nc)
		}
		masters := mastersIn(nodes)
		if err == nil && c.Kind == KindRedisServer {
			// Every node that is up is a master serving slots or a
			// replica of one, as this node sees it.
			ids := map[string]bool{}
			for _, n := range nodes {
				if n.master && n.slots && !n.failed {
					ids[n.id] = true
				}
			}
			up := 0
			for _, n := range nodes {
				if !n.failed && (ids[n.id] || ids[n.masterID]) {
					up++
				}
			}
			if want := len(c.upAddrs()); up < want {
				err = fmt.Errorf("%s knows %d of %d nodes in their roles", addr, up, want)
			}
		}
		_ = nc.Close()
		if err != nil {
			return err
		}
		if want == nil {
			want = masters
		} else if !slices.Equal(want, masters) {
			return fmt.Errorf("%s sees masters %v, another node %v", addr, masters, want)
		}
	}
	return nil
}

// upAddrs returns the nodes to ask: those running, for a cluster devstore
// started; all listed, for an external one.
func (c *RedisCluster) upAddrs() []string {
	if c.Kind == KindExternal {
		return c.Addrs
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var up []string
	for _, n := range c.nodes {
		if n.proc != nil {
			up = append(up, n.addr)
		}
	}
	return up
}

// clusterNodeInfo is one line of CLUSTER NODES.
type clusterNodeInfo struct {
	id, addr, masterID string
	master, failed     bool
	slots              bool
}

func clusterNodes(ctx context.Context, nc *redis.Client) ([]clusterNodeInfo, error) {
	s, err := nc.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var nodes []clusterNodeInfo
	for line := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		nodes = append(nodes, clusterNodeInfo{
			id:       f[0],
			addr:     addr,
			masterID: f[3],
			master:   strings.Contains(f[2], "master"),
			failed:   strings.Contains(f[2], "fail") && !strings.Contains(f[2], "fail?"),
			slots:    len(f) > 8,
		})
	}
	return nodes, nil
}

// mastersOf returns the sorted addresses of the masters serving slots, as
// the node nc sees them.
func mastersOf(ctx context.Context, nc *redis.Client) ([]string, error) {
	nodes, err := clusterNodes(ctx, nc)
	if err != nil {
		return nil, err
	}
	return mastersIn(nodes), nil
}

// mastersIn returns the sorted addresses of the masters serving slots.
func mastersIn(nodes []clusterNodeInfo) []string {
	var masters []string
	for _, n := range nodes {
		if n.master && n.slots && !n.failed {
			masters = append(masters, n.addr)
		}
	}
	slices.Sort(masters)
	return masters
}

// Masters returns the addresses of the masters that serve slots, as a node
// that is up sees them.
func (c *RedisCluster) Masters(ctx context.Context) ([]string, error) {
	var err error
	for _, addr := range c.upAddrs() {
		nc := nodeClient(addr)
		var m []string
		m, err = mastersOf(ctx, nc)
		_ = nc.Close()
		if err == nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("devstore: redis cluster masters: %w", err)
}

// MasterOf returns the address of the master serving the slot of key, as
// a node that is up sees it.
func (c *RedisCluster) MasterOf(ctx context.Context, key string) (string, error) {
	var err error
	for _, addr := range c.upAddrs() {
		nc := nodeClient(addr)
		var slot int64
		var slots []redis.ClusterSlot
		slot, err = nc.ClusterKeySlot(ctx, key).Result()
		if err == nil {
			slots, err = nc.ClusterSlots(ctx).Result()
		}
		_ = nc.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				return s.Nodes[0].Addr, nil
			}
		}
		return "", fmt.Errorf("devstore: master of %q: slot %d is not served", key, slot)
	}
	return "", fmt.Errorf("devstore: master of %q: %w", key, err)
}

// Replica returns the address of a replica of master that is up.
func (c *RedisCluster) Replica(ctx context.Context, master string) (string, error) {
	for _, addr := range c.upAddrs() {
		nc := nodeClient(addr)
		nodes, err := clusterNodes(ctx, nc)
		_ = nc.Close()
		if err != nil {
			continue
		}
		var id string
		for _, n := range nodes {
			if n.addr == master {
				id = n.id
			}
		}
		if id == "" {
			return "", fmt.Errorf("replica of %s: %w", master, ErrUnknownNode)
		}
		up := c.upAddrs()
		for _, n := range nodes {
			if n.masterID == id && !n.failed && (c.Kind == KindExternal || slices.Contains(up, n.addr)) {
				return n.addr, nil
			}
		}
		return "", fmt.Errorf("devstore: replica of %s: %w", master, ErrNoReplica)
	}
	return "", fmt.Errorf("devstore: replica of %s: no node answers", master)
}

// Failover promotes a replica of master with CLUSTER FAILOVER (a
// coordinated failover: the replica catches up with the master first, so
// no acknowledged write is lost) and waits until the cluster is ok with the
// replica as a master. It returns the new master's address. It works on an
// external cluster too.
func (c *RedisCluster) Failover(ctx context.Context, master string) (string, error) {
	replica, err := c.Replica(ctx, master)
	if err != nil {
		return "", err
	}
	nc := nodeClient(replica)
	err = nc.ClusterFailover(ctx).Err()
	_ = nc.Close()
	if err != nil {
		return "", fmt.Errorf("devstore: CLUSTER FAILOVER on %s: %w", replica, err)
	}
	if err := c.waitMaster(ctx, replica); err != nil {
		return "", err
	}
	return replica, nil
}

// waitMaster waits until the cluster is ok and addr is one of its masters.
func (c *RedisCluster) waitMaster(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if err := c.WaitOK(ctx); err != nil {
			return err
		}
		m, err := c.Masters(ctx)
		if err == nil && slices.Contains(m, addr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devstore: %s did not become a master: %w", addr, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *RedisCluster) node(addr string) (*clusterNode, error) {
	if c.Kind != KindRedisServer {
		return nil, fmt.Errorf("%s Redis Cluster: %w", c.Kind, ErrCannotRestart)
	}
	for _, n := range c.nodes {
		if n.addr == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("devstore: %s: %w", addr, ErrUnknownNode)
}

// Kill kills the node at addr with SIGKILL, as a crash would, and waits for
// it to exit. If it was a master, its replica is promoted once the other
// masters have missed it for the node timeout (2 s); see KillMaster. It is
// a no-op for a node that is down, and returns ErrCannotRestart for an
// external cluster.
func (c *RedisCluster) Kill(addr string) error { return c.halt(addr, (*redisProcess).kill) }

// Stop shuts the node at addr down cleanly (SIGTERM) and waits for it to
// exit; otherwise as Kill.
func (c *RedisCluster) Stop(addr string) error { return c.halt(addr, (*redisProcess).stop) }

// halt ends the node at addr with end, unless it is down already.
func (c *RedisCluster) halt(addr string, end func(*redisProcess)) error {
	n, err := c.node(addr)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.proc != nil {
		end(n.proc)
		n.proc = nil
	}
	return nil
}

// StartNode starts a node stopped by Kill or Stop again, on its ports, and
// waits until the cluster is ok. It comes back without data and rejoins as
// the replica of the node that took its slots, if one did. It is a no-op
// for a node that is up.
func (c *RedisCluster) StartNode(ctx context.Context, addr string) error {
	n, err := c.node(addr)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if n.proc == nil {
		err = c.startNode(ctx, n)
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.WaitOK(ctx)
}

// KillMaster kills the master at addr and waits until one of its replicas
// has taken over its slots and the cluster is ok again; it returns the new
// master's address.
func (c *RedisCluster) KillMaster(ctx context.Context, addr string) (string, error) {
	replica, err := c.Replica(ctx, addr)
	if err != nil {
		return "", err
	}
	if err := c.Kill(addr); err != nil {
		return "", err
	}
	if err := c.waitMaster(ctx, replica); err != nil {
		return "", err
	}
	return replica, nil
}

// Close stops every node devstore started and removes their files. It
// leaves an external cluster alone.
func (c *RedisCluster) Close() error {
	if c.Kind != KindRedisServer {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for _, n := range c.nodes {
		if n.proc != nil {
			n.proc.stop()
			n.proc = nil
		}
	}
	c.mu.Unlock()
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("devstore: remove redis cluster dir: %w", err)
	}
	return nil
}

// lastLines returns the last n non-empty lines of s, joined by " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
