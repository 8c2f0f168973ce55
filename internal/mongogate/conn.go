package mongogate

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// hungWriteWarn is how often a connection whose client hung up says that
// it is still waiting for the reply to the write it holds a grant for,
// until Options.HungWriteLimit.
const hungWriteWarn = 5 * time.Second

// proxyConn is one client connection and its own upstream connection.
//
// Requests and replies are pumped by two goroutines rather than in lock-step,
// because a request does not always get exactly one reply: a moreToCome
// request should get none (FerretDB sends one anyway), and an exhaust cursor
// gets many. The request pump takes a write's grant from the gate's
// locks, and a slot of the gate's in-flight bound for every request that
// reaches PostgreSQL; the reply pump gives both back once the matching
// reply is back. A third goroutine reads the client, so that a client that
// hangs up while its request waits for either is noticed (clientGone).
type proxyConn struct {
	g                *Gate
	client, upstream net.Conn
	closeOnce        sync.Once
	done             chan struct{} // closed by close
	clientGone       chan struct{} // closed when reading the client fails
	clientErr        error         // why; set before clientGone is closed

	mu        sync.Mutex
	closed    bool
	held      *grant        // the grant of the write in flight, if any
	heldFor   int32         // requestID of the write whose reply releases held
	released  chan struct{} // closed when this connection releases held
	slotFor   map[int32]struct{}
	noReplyTo map[int32]struct{}
}

func newProxyConn(g *Gate, client, upstream net.Conn) *proxyConn {
	return &proxyConn{
		g:          g,
		client:     client,
		upstream:   upstream,
		done:       make(chan struct{}),
		clientGone: make(chan struct{}),
		slotFor:    make(map[int32]struct{}),
		noReplyTo:  make(map[int32]struct{}),
	}
}

// run proxies until either side closes, then closes both.
func (pc *proxyConn) run() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pc.logEnd("upstream", pc.pumpReplies())
		pc.close()
	}()

	pc.logEnd("client", pc.pumpRequests())
	// A client that hangs up mid-write (the driver closes a connection
	// whose operation's context was cancelled) must not release its grant
	// before FerretDB has finished that write, or the next write to its
	// documents would run concurrently with it: exactly the lost update the
	// gate exists to stop.
	pc.awaitHeldReply(done)
	pc.close()
	<-done
}

// awaitHeldReply waits, if this connection holds a grant, until the reply
// to its write has come back from upstream, or upstream has gone, or
// HungWriteLimit has passed. Releasing the grant while FerretDB may still
// apply the write would let the next write to its documents run
// concurrently with it, the lost update the gate exists to stop; holding
// it for ever would lock its documents for ever if the write never ends.
// The limit is far past any write that is only slow, and the cut is logged
// and counted.
func (pc *proxyConn) awaitHeldReply(upstreamDone <-chan struct{}) {
	pc.mu.Lock()
	holding, released := pc.held != nil, pc.released
	pc.mu.Unlock()
	if !holding {
		return
	}
	t := time.NewTicker(hungWriteWarn)
	defer t.Stop()
	limit := time.NewTimer(pc.g.hungLimit)
	defer limit.Stop()
	for start := time.Now(); ; {
		select {
		case <-released:
			return
		case <-upstreamDone:
			return
		case <-t.C:
			pc.g.logger.Warn("still waiting for the reply to a write whose client hung up; its documents stay locked",
				slog.Duration("waited", time.Since(start).Round(time.Second)), slog.Duration("limit", pc.g.hungLimit))
		case <-limit.C:
			pc.g.abandoned.Add(1)
			pc.g.logger.Error("closing the upstream connection of a write whose client hung up and whose reply did not come; its documents are free again, and the write may still land",
				slog.Duration("waited", time.Since(start).Round(time.Second)))
			return
		}
	}
}

// readRequests reads the client's requests into msgs until reading fails,
// then records why and closes clientGone.
func (pc *proxyConn) readRequests(msgs chan<- message) {
	defer close(pc.clientGone)
	r := bufio.NewReader(pc.client)
	for {
		m, err := readMessage(r)
		if err != nil {
			pc.clientErr = err
			return
		}
		select {
		case msgs <- m:
		case <-pc.done:
			pc.clientErr = net.ErrClosed
			return
		}
	}
}

// pumpRequests forwards client requests upstream, taking a write's grant
// and a request's slot before the request is forwarded.
func (pc *proxyConn) pumpRequests() error {
	msgs := make(chan message)
	pc.g.wg.Add(1)
	go func() {
		defer pc.g.wg.Done()
		pc.readRequests(msgs)
	}()

	for {
		var m message
		select {
		case m = <-msgs:
		case <-pc.clientGone:
			return pc.clientErr
		}

		if m.opCode() == opMsg {
			info := parseOpMsg(m)

			switch {
			case info.moreToCome:
				// Remember it before forwarding, so the stray reply
				// FerretDB sends cannot arrive first and reach a client
				// that is not expecting it.
				pc.expectNoReply(m.requestID())
			case info.isWrite():
				if !pc.lockFor(m.requestID(), info) {
					return pc.gaveUp()
				}
				if !pc.takeSlot(m.requestID()) {
					pc.unlockFor(m.requestID())
					return pc.gaveUp()
				}
				pc.g.writes.Add(1)
				if info.exclusive {
					pc.g.exclusive.Add(1)
				}
			case info.needsUpstreamWork():
				if !pc.takeSlot(m.requestID()) {
					return pc.gaveUp()
				}
			}
		}

		if _, err := pc.upstream.Write(m.raw); err != nil {
			return err
		}
	}
}

// gaveUp counts a request dropped unforwarded because its client hung up
// (or the connection closed) while it waited, and says why it ended.
func (pc *proxyConn) gaveUp() error {
	pc.g.dropped.Add(1)
	select {
	case <-pc.clientGone:
		return pc.clientErr
	default:
		return net.ErrClosed
	}
}

// pumpReplies forwards upstream replies to the client, dropping replies to
// moreToCome requests and releasing a write's grant after its reply.
func (pc *proxyConn) pumpReplies() error {
	r := bufio.NewReader(pc.upstream)

	for {
		m, err := readMessage(r)
		if err != nil {
			return err
		}

		if pc.isNoReply(m.responseTo()) {
			pc.g.strays.Add(1)
			continue
		}

		// With the reply read from upstream, FerretDB has finished this
		// request, so another write on its documents may start and another
		// request may be forwarded. Release before passing the reply on: a
		// client that is slow to read must not hold up other writers.
		pc.unlockFor(m.responseTo())

		if _, err := pc.client.Write(m.raw); err != nil {
			return err
		}
	}
}

// lockFor takes the grant of the write requestID. It reports false, holding
// nothing, if the client hung up or the connection was closed meanwhile.
func (pc *proxyConn) lockFor(requestID int32, info opMsgInfo) bool {
	// One write in flight per connection: a write pipelined behind another
	// waits for the reply to the first, whose grant would otherwise be
	// overwritten and never released. Only this connection's request pump
	// sets held, so after the wait it is free.
	pc.mu.Lock()
	held, released := pc.held != nil, pc.released
	pc.mu.Unlock()
	if held {
		select {
		case <-released:
		case <-pc.clientGone:
			return false
		}
	}

	g := pc.g.locks.lock(info.docs, info.exclusive, pc.clientGone)
	if g == nil {
		return false
	}

	pc.mu.Lock()
	defer pc.mu.Unlock()

	if pc.closed {
		g.release()
		return false
	}
	pc.held, pc.heldFor, pc.released = g, requestID, make(chan struct{})
	return true
}

// takeSlot waits for a slot of the gate's in-flight bound for the request
// requestID. It reports false, holding none, if the client hung up or the
// connection was closed meanwhile.
func (pc *proxyConn) takeSlot(requestID int32) bool {
	select {
	case pc.g.slots <- struct{}{}:
	case <-pc.clientGone:
		return false
	case <-pc.done:
		return false
	}

	pc.mu.Lock()
	defer pc.mu.Unlock()

	if pc.closed {
		<-pc.g.slots
		return false
	}
	pc.slotFor[requestID] = struct{}{}
	return true
}

// unlockFor releases the grant this connection holds if it is for the
// request answered by a reply with the given responseTo.
func (pc *proxyConn) unlockFor(responseTo int32) {
	pc.mu.Lock()
	defer pc.mu.Unlock()

	if pc.held != nil && pc.heldFor == responseTo {
		pc.releaseLocked()
	}
	if _, ok := pc.slotFor[responseTo]; ok {
		delete(pc.slotFor, responseTo)
		<-pc.g.slots
	}
}

// releaseLocked releases the grant held; pc.mu must be held.
func (pc *proxyConn) releaseLocked() {
	pc.held.release()
	pc.held = nil
	close(pc.released)
}

func (pc *proxyConn) expectNoReply(requestID int32) {
	pc.mu.Lock()
	defer pc.mu.Unlock()

	pc.noReplyTo[requestID] = struct{}{}
}

// isNoReply reports whether responseTo answers a moreToCome request, and
// forgets that request: FerretDB answers each request at most once.
func (pc *proxyConn) isNoReply(responseTo int32) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()

	_, ok := pc.noReplyTo[responseTo]
	delete(pc.noReplyTo, responseTo)
	return ok
}

// close closes both sides and releases the grant and the slots this
// connection holds, so that a client or upstream dying mid-write cannot
// block other requests forever.
func (pc *proxyConn) close() {
	pc.closeOnce.Do(func() {
		pc.mu.Lock()
		pc.closed = true
		close(pc.done)
		if pc.held != nil {
			pc.releaseLocked()
		}
		for id := range pc.slotFor {
			delete(pc.slotFor, id)
			<-pc.g.slots
		}
		pc.mu.Unlock()

		_ = pc.client.Close()
		_ = pc.upstream.Close()
	})
}

// logEnd logs why one direction stopped; the usual reasons (a side closed
// the connection) are only worth a debug line.
func (pc *proxyConn) logEnd(side string, err error) {
	level := slog.LevelDebug
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		level = slog.LevelInfo
	}
	pc.g.logger.Log(context.Background(), level, "connection closed",
		slog.String("client", pc.client.RemoteAddr().String()),
		slog.String("closedBy", side), slog.Any("error", err))
}
