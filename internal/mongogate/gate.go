// Package mongogate is a MongoDB wire-protocol proxy that restores
// single-document atomicity in front of FerretDB v1.
//
// FerretDB v1 executes update and findAndModify as a query followed by a
// separate write by _id. Two concurrent conditional updates can therefore both
// match the same document and both apply: many clients can hold the same
// lease at once, and conditional $inc updates are lost
// (docs/embedded-store.md). A real MongoDB does not need the gate.
//
// The gate forwards every message unchanged, but a write command (insert,
// update, delete, findAndModify) waits, from before it is forwarded until
// its reply is back, for every other write to the same documents: those
// named by the same database, collection and _id. Writes to different
// documents run at once. A write whose documents the gate cannot name from
// the command (a filter without a plain _id, a multi-document update, an
// insert without _id, anything it does not parse) runs alone, as do schema
// commands (create, drop, createIndexes, ...). Each write is thus atomic
// with respect to every other write to its document, which is all that
// MongoDB promises; reads (find, aggregate, getMore, hello, ...) are never
// blocked. Clients that bypass the gate, or a second gate on the same
// FerretDB, get no such guarantee.
//
// Unacknowledged writes (OP_MSG with moreToCome, i.e. write concern w:0) are
// forwarded without waiting: the gate cannot know when they finish.
package mongogate

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds how long a new client connection waits for its upstream,
// long enough to ride out an upstream restart.
const dialTimeout = 5 * time.Second

// Gate is a running proxy. It is safe for concurrent use.
type Gate struct {
	ln     net.Listener
	logger *slog.Logger

	// locks orders write commands across all connections: a write's grant
	// is held from forwarding it until its reply is back from upstream.
	locks docLocks

	mu       sync.Mutex
	upstream string
	conns    map[*proxyConn]struct{}
	closed   bool

	wg sync.WaitGroup

	// Counters for tests and debugging.
	writes    atomic.Int64 // write commands forwarded with a grant
	exclusive atomic.Int64 // of those, the ones that ran alone
	dropped   atomic.Int64 // replies to moreToCome requests dropped
}

// Start listens on a free loopback port and forwards every accepted connection
// to upstream (host:port). A nil logger means slog.Default().
func Start(upstream string, logger *slog.Logger) (*Gate, error) {
	if logger == nil {
		logger = slog.Default()
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("mongogate: listen: %w", err)
	}

	g := &Gate{
		ln:       ln,
		logger:   logger.With(slog.String("component", "mongogate"), slog.String("addr", ln.Addr().String())),
		upstream: upstream,
		conns:    make(map[*proxyConn]struct{}),
	}

	g.wg.Add(1)
	go g.acceptLoop()

	return g, nil
}

// Addr returns the host:port clients connect to. It does not change for the
// lifetime of the gate, even when the upstream does.
func (g *Gate) Addr() string {
	return g.ln.Addr().String()
}

// SetUpstream makes new client connections go to upstream (host:port).
// Existing connections keep their upstream until either side closes them;
// when an upstream shuts down it closes them itself, and clients reconnect.
func (g *Gate) SetUpstream(upstream string) {
	g.mu.Lock()
	defer g.mu.Unlock()

	g.upstream = upstream
}

// CloseConns closes every connection open now, on both sides, and keeps
// listening. Clients reconnect through the gate. Use it before stopping an
// upstream that waits for its clients to leave: FerretDB gives them 3 seconds.
func (g *Gate) CloseConns() {
	for _, pc := range g.snapshot() {
		pc.close()
	}
}

// Close stops listening, closes all connections and waits until every
// goroutine of the gate has returned. It is safe to call more than once.
func (g *Gate) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()

	// No connection can be tracked after closed is set, so this catches all.
	err := g.ln.Close()
	g.CloseConns()

	g.wg.Wait()

	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("mongogate: close listener: %w", err)
	}
	return nil
}

func (g *Gate) acceptLoop() {
	defer g.wg.Done()

	for {
		client, err := g.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failures (e.g. too many open files) must not kill
			// the gate; back off briefly instead of spinning.
			g.logger.Warn("accept failed", slog.Any("error", err))
			time.Sleep(50 * time.Millisecond)
			continue
		}

		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.serve(client)
		}()
	}
}

// serve proxies one client connection until either side closes it.
func (g *Gate) serve(client net.Conn) {
	upstream, err := g.dialUpstream()
	if err != nil {
		g.logger.Warn("upstream unavailable, dropping client connection",
			slog.String("client", client.RemoteAddr().String()), slog.Any("error", err))
		_ = client.Close()
		return
	}

	pc := newProxyConn(g, client, upstream)
	if !g.track(pc) {
		pc.close()
		return
	}
	defer g.untrack(pc)

	pc.run()
}

// dialUpstream connects to the current upstream, retrying until dialTimeout
// so that clients connecting while the upstream restarts are delayed rather
// than refused. Each attempt re-reads the upstream set by SetUpstream.
func (g *Gate) dialUpstream() (net.Conn, error) {
	deadline := time.Now().Add(dialTimeout)

	for {
		g.mu.Lock()
		addr, closed := g.upstream, g.closed
		g.mu.Unlock()

		if closed {
			return nil, errors.New("gate closed")
		}

		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return conn, nil
		}

		if time.Now().After(deadline) {
			return nil, fmt.Errorf("dial upstream %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// track registers pc so that Close can cut it; it reports false if the gate
// is already closed.
func (g *Gate) track(pc *proxyConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()

	if g.closed {
		return false
	}
	g.conns[pc] = struct{}{}
	return true
}

func (g *Gate) snapshot() []*proxyConn {
	g.mu.Lock()
	defer g.mu.Unlock()

	conns := make([]*proxyConn, 0, len(g.conns))
	for pc := range g.conns {
		conns = append(conns, pc)
	}
	return conns
}

func (g *Gate) untrack(pc *proxyConn) {
	g.mu.Lock()
	defer g.mu.Unlock()

	delete(g.conns, pc)
}
