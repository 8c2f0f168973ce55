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

// writeDrainWarn is how often a connection whose client hung up says that
// it is still waiting for the reply to the write it holds the mutex for.
const writeDrainWarn = 30 * time.Second

// proxyConn is one client connection and its own upstream connection.
//
// Requests and replies are pumped by two goroutines rather than in lock-step,
// because a request does not always get exactly one reply: a moreToCome
// request should get none (FerretDB sends one anyway), and an exhaust cursor
// gets many. The request pump takes the gate's write mutex; the reply pump
// releases it once the matching reply has reached the client.
type proxyConn struct {
	g                *Gate
	client, upstream net.Conn
	closeOnce        sync.Once

	mu        sync.Mutex
	closed    bool
	holding   bool          // this connection holds g.writeMu
	heldFor   int32         // requestID of the write whose reply releases g.writeMu
	released  chan struct{} // closed when this connection gives g.writeMu back
	noReplyTo map[int32]struct{}
}

func newProxyConn(g *Gate, client, upstream net.Conn) *proxyConn {
	return &proxyConn{
		g:         g,
		client:    client,
		upstream:  upstream,
		noReplyTo: make(map[int32]struct{}),
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
	// whose operation's context was cancelled) must not release the mutex
	// before FerretDB has finished that write, or the next write would run
	// concurrently with it: exactly the lost update the gate exists to stop.
	pc.awaitHeldReply(done)
	pc.close()
	<-done
}

// awaitHeldReply waits, if this connection holds the write mutex, until the
// reply to that write has come back from upstream or upstream has gone. It
// never gives up: releasing the mutex while FerretDB may still apply the
// write would let the next write run concurrently with it, the lost update
// the gate exists to stop. A write that takes long is logged every
// writeDrainWarn instead.
func (pc *proxyConn) awaitHeldReply(upstreamDone <-chan struct{}) {
	pc.mu.Lock()
	holding, released := pc.holding, pc.released
	pc.mu.Unlock()
	if !holding {
		return
	}
	t := time.NewTicker(writeDrainWarn)
	defer t.Stop()
	for start := time.Now(); ; {
		select {
		case <-released:
			return
		case <-upstreamDone:
			return
		case <-t.C:
			pc.g.logger.Warn("still waiting for the reply to a write whose client hung up; the write mutex stays held",
				slog.Duration("waited", time.Since(start).Round(time.Second)))
		}
	}
}

// pumpRequests forwards client requests upstream, taking the write mutex
// before a write command is forwarded.
func (pc *proxyConn) pumpRequests() error {
	r := bufio.NewReader(pc.client)

	for {
		m, err := readMessage(r)
		if err != nil {
			return err
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
				if !pc.lockFor(m.requestID()) {
					return net.ErrClosed
				}
				pc.g.writes.Add(1)
			}
		}

		if _, err := pc.upstream.Write(m.raw); err != nil {
			return err
		}
	}
}

// pumpReplies forwards upstream replies to the client, dropping replies to
// moreToCome requests and releasing the write mutex after the reply to the
// write that took it.
func (pc *proxyConn) pumpReplies() error {
	r := bufio.NewReader(pc.upstream)

	for {
		m, err := readMessage(r)
		if err != nil {
			return err
		}

		if pc.isNoReply(m.responseTo()) {
			pc.g.dropped.Add(1)
			continue
		}

		// With the reply read from upstream, FerretDB has finished this
		// write, so another may start. Release before passing the reply on:
		// a client that is slow to read must not hold up every writer.
		pc.unlockFor(m.responseTo())

		if _, err := pc.client.Write(m.raw); err != nil {
			return err
		}
	}
}

// lockFor takes the gate's write mutex for the request requestID. It reports
// false, without holding the mutex, if the connection was closed meanwhile.
func (pc *proxyConn) lockFor(requestID int32) bool {
	pc.g.writeMu.Lock()

	pc.mu.Lock()
	defer pc.mu.Unlock()

	if pc.closed {
		pc.g.writeMu.Unlock()
		return false
	}
	pc.holding, pc.heldFor, pc.released = true, requestID, make(chan struct{})
	return true
}

// unlockFor releases the gate's write mutex if this connection holds it for
// the request answered by a reply with the given responseTo.
func (pc *proxyConn) unlockFor(responseTo int32) {
	pc.mu.Lock()
	defer pc.mu.Unlock()

	if pc.holding && pc.heldFor == responseTo {
		pc.holding = false
		close(pc.released)
		pc.g.writeMu.Unlock()
	}
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

// close closes both sides and releases the write mutex if this connection
// holds it, so that a client or upstream dying mid-write cannot block every
// other writer forever.
func (pc *proxyConn) close() {
	pc.closeOnce.Do(func() {
		pc.mu.Lock()
		pc.closed = true
		if pc.holding {
			pc.holding = false
			close(pc.released)
			pc.g.writeMu.Unlock()
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
