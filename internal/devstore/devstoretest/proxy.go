package devstoretest

import (
	"bytes"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy in front of a MongoDB, for a test that cuts the
// store's link under a client: it forwards every connection until Cut,
// Silence or Close says otherwise. Point the client at Addr.
type Proxy struct {
	ln       net.Listener
	upstream string
	silent   atomic.Bool
	mu       sync.Mutex
	closed   bool
	conns    []net.Conn
	cuts     []string // markers of Cut not yet met
}

// MongoProxy starts a Proxy to the MongoDB at uri (one host) on a free
// loopback port, and closes it when the test ends.
func MongoProxy(t testing.TB, uri string) *Proxy {
	t.Helper()
	u, err := url.Parse(uri)
	if err != nil || u.Host == "" || strings.Contains(u.Host, ",") {
		t.Fatalf("proxy: want a MongoDB URI with one host, got %q (%v)", uri, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, upstream: u.Host}
	t.Cleanup(p.Close)
	go p.serve()
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops the next connection on which the client sends bytes containing
// marker, once they are forwarded: the store receives the request, and its
// answer never comes back, so its outcome is unknown to the client. A
// MongoDB command is its name and a NUL ("update\x00", "find\x00"). Each
// Cut drops one connection.
func (p *Proxy) Cut(marker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts = append(p.cuts, marker)
}

// Silence makes the proxy forward nothing more, either way, and close
// nothing, new connections included: a link after a partition, whose
// connections stay open and answer nothing.
func (p *Proxy) Silence() { p.silent.Store(true) }

// Close stops accepting connections and closes every one: the store is
// gone. It is called when the test ends.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		closed := p.closed
		if !closed {
			p.conns = append(p.conns, c, up)
		}
		p.mu.Unlock()
		if closed {
			_ = c.Close()
			_ = up.Close()
			return
		}
		cutOff := new(atomic.Bool) // the pair met a Cut: no reply goes back
		go p.pump(c, up, cutOff, true)
		go p.pump(up, c, cutOff, false)
	}
}

// pump forwards from to to, unless silenced, and, when cuts, ends the
// connection after bytes that meet a Cut: it marks the pair cut off before
// it forwards them, so that the other direction's pump forwards no reply
// to them. Once it ends, it closes both sides, unless silenced.
func (p *Proxy) pump(from, to net.Conn, cutOff *atomic.Bool, cuts bool) {
	defer func() {
		if !p.silent.Load() {
			_ = from.Close()
			_ = to.Close()
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !p.silent.Load() {
			if !cuts && cutOff.Load() {
				return
			}
			cut := cuts && p.cut(buf[:n])
			if cut {
				cutOff.Store(true)
			}
			if _, err := to.Write(buf[:n]); err != nil || cut {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut reports whether b meets a pending Cut, and consumes it.
func (p *Proxy) cut(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, m := range p.cuts {
		if bytes.Contains(b, []byte(m)) {
			p.cuts = append(p.cuts[:i], p.cuts[i+1:]...)
			return true
		}
	}
	return false
}
