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
// MongoDB promises; reads (find, aggregate, getMore, ...) never wait for
// a write. Clients that bypass the gate, or a second gate on the same
// FerretDB, get no such guarantee.
//
// Unacknowledged writes (OP_MSG with moreToCome, i.e. write concern w:0) are
// forwarded without waiting: the gate cannot know when they finish.
//
// The gate also keeps FerretDB from deadlocking itself. FerretDB v1 on
// PostgreSQL answers an update, a delete or a findAndModify with a query
// whose rows hold one of its pool's connections while the write begins a
// transaction on a second. With as many such commands at once as the pool
// has connections, each holds one and waits for another, and none is ever
// given back. So the gate forwards at most Options.MaxInFlight requests at
// a time, across every connection (commands that never touch PostgreSQL,
// such as hello and ping, excepted): below half the pool, no command can
// wait for a connection that only another waiting command could free. A
// request that waits for its turn, or for its documents, and whose client
// hangs up meanwhile is dropped without being forwarded: it changed nothing.
// A write whose client hung up after it was forwarded keeps its documents
// until its reply comes, for at most Options.HungWriteLimit; then the gate
// closes its upstream connection and frees them (docs/embedded-store.md).
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

// FerretDBPool is the PostgreSQL connection pool the embedded FerretDB is
// started with (its pool_max_conns), and DefaultMaxInFlight the gate's
// bound for it: each command FerretDB runs holds at most two of the pool's
// connections at once (a query's rows and a write's transaction), so with
// at most half the pool's worth of commands, less two for FerretDB's own
// metadata queries, every command can get what it waits for.
const (
	FerretDBPool       = 64
	DefaultMaxInFlight = FerretDBPool/2 - 2
)

// DefaultHungWriteLimit is how long a write whose client hung up may go
// unanswered before the gate closes its upstream connection and frees its
// documents. With the in-flight bound, a write through the gate takes
// milliseconds, and seconds on a machine out of CPU; one that is still
// unanswered after this long is stuck upstream.
const DefaultHungWriteLimit = 20 * time.Second

// Options tune a gate; the zero value means the defaults.
type Options struct {
	// MaxInFlight bounds the requests forwarded upstream and not yet
	// answered, across every connection (0: DefaultMaxInFlight). A request
	// past it waits in the gate, in arrival order, before it is forwarded.
	MaxInFlight int

	// HungWriteLimit bounds how long a forwarded write whose client hung
	// up keeps its documents (0: DefaultHungWriteLimit). When it passes,
	// the gate closes the write's upstream connection, logs it and counts
	// it in Stats.Abandoned. FerretDB v1 runs a connection's commands one
	// at a time and notices the close only after the write, so a write
	// that is stuck, rather than slow, may still land after its documents
	// were freed: the bound trades that for a store that never stays
	// locked.
	HungWriteLimit time.Duration
}

// Stats is what a gate has done and holds now, for tests, logs and a run
// that wants to say why the store stopped answering.
type Stats struct {
	Conns     int   // client connections open
	InFlight  int   // requests forwarded and not yet answered, of MaxInFlight
	Documents int   // documents with a write holding or waiting for them
	Writes    int64 // write commands forwarded with a grant
	Exclusive int64 // of those, the ones that ran alone
	Dropped   int64 // requests never forwarded: their client hung up while they waited
	Abandoned int64 // writes whose upstream connection was closed after HungWriteLimit
}

// Gate is a running proxy. It is safe for concurrent use.
type Gate struct {
	ln     net.Listener
	logger *slog.Logger

	// locks orders write commands across all connections: a write's grant
	// is held from forwarding it until its reply is back from upstream.
	locks docLocks

	// slots holds a value for each request forwarded and not yet answered
	// (MaxInFlight); hungLimit is Options.HungWriteLimit.
	slots     chan struct{}
	hungLimit time.Duration

	mu       sync.Mutex
	upstream string
	conns    map[*proxyConn]struct{}
	closed   bool

	wg sync.WaitGroup

	// Counters for Stats.
	writes    atomic.Int64 // write commands forwarded with a grant
	exclusive atomic.Int64 // of those, the ones that ran alone
	strays    atomic.Int64 // replies to moreToCome requests dropped
	dropped   atomic.Int64 // requests never forwarded: their client hung up
	abandoned atomic.Int64 // writes cut after HungWriteLimit
}

// Start listens on a free loopback port and forwards every accepted connection
// to upstream (host:port). A nil logger means slog.Default().
func Start(upstream string, logger *slog.Logger, opts Options) (*Gate, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if opts.MaxInFlight < 0 || opts.HungWriteLimit < 0 {
		return nil, fmt.Errorf("mongogate: MaxInFlight %d and HungWriteLimit %v must not be negative", opts.MaxInFlight, opts.HungWriteLimit)
	}
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.HungWriteLimit == 0 {
		opts.HungWriteLimit = DefaultHungWriteLimit
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("mongogate: listen: %w", err)
	}

	g := &Gate{
		ln:        ln,
		logger:    logger.With(slog.String("component", "mongogate"), slog.String("addr", ln.Addr().String())),
		upstream:  upstream,
		conns:     make(map[*proxyConn]struct{}),
		slots:     make(chan struct{}, opts.MaxInFlight),
		hungLimit: opts.HungWriteLimit,
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

// Stats reports what the gate has done and holds now.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	conns := len(g.conns)
	g.mu.Unlock()
	return Stats{
		Conns:     conns,
		InFlight:  len(g.slots),
		Documents: g.locks.waiting(),
		Writes:    g.writes.Load(),
		Exclusive: g.exclusive.Load(),
		Dropped:   g.dropped.Load(),
		Abandoned: g.abandoned.Load(),
	}
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
