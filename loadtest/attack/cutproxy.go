package attack

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
)

// cutProxy is a TCP proxy in front of one replica that cuts some
// connections just as the answer arrives: the request has reached the
// replica, which has done its work, and the client sees the connection
// close without a byte of the answer. Each chunk the replica sends back is
// cut with probability rate; a cut closes both sides.
type cutProxy struct {
	ln       net.Listener
	upstream string // host:port of the replica
	rate     float64
	cuts     atomic.Int64
	mu       sync.Mutex
	open     map[net.Conn]bool // both sides of every proxied connection
	closing  bool
	conns    sync.WaitGroup
}

func startCutProxy(upstream string, rate float64) (*cutProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &cutProxy{ln: ln, upstream: upstream, rate: rate, open: map[net.Conn]bool{}}
	go p.serve()
	return p, nil
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) Cuts() int64 { return p.cuts.Load() }

// Close stops accepting, closes every open connection and waits for
// their goroutines to end.
func (p *cutProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closing = true
	for c := range p.open {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.conns.Wait()
	return err
}

// track adds c to the open connections, or closes it at once if the proxy
// is closing; untrack removes it.
func (p *cutProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		_ = c.Close()
		return
	}
	p.open[c] = true
}

func (p *cutProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.open, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.conns.Go(func() { p.handle(c) })
	}
}

func (p *cutProxy) handle(client net.Conn) {
	p.track(client)
	defer p.untrack(client)
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return // the client sees the connection close: no answer
	}
	p.track(up)
	defer p.untrack(up)
	go func() {
		_, _ = io.Copy(up, client)
		// The client is done sending (or gone): let the replica see EOF.
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if rand.Float64() < p.rate {
				p.cuts.Add(1)
				if tc, ok := client.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // a reset, not a clean close
				}
				return
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
