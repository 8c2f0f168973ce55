package mongostore

import (
	"context"
	"errors"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// silentProxy forwards TCP connections to the test store until silence is
// called; from then on it reads what either side sends and forwards
// nothing, closing nothing: a link after a partition, whose connections
// stay open and answer nothing.
type silentProxy struct {
	ln     net.Listener
	silent atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newSilentProxy(t *testing.T) *silentProxy {
	t.Helper()
	u, err := url.Parse(mongoURI)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go p.pump(c, up)
			go p.pump(up, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *silentProxy) pump(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !p.silent.Load() {
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *silentProxy) silence() { p.silent.Store(true) }

// TestPassesEndOnSilentLink: once the store's link goes silent (packets
// dropped, no reset), a heartbeat and each recovery pass return an error
// by their deadlines instead of blocking the next pass for ever.
func TestPassesEndOnSilentLink(t *testing.T) {
	t.Parallel() // its own database (or server); it mostly waits
	base := testStore(t)
	p := newSilentProxy(t)
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + p.ln.Addr().String() + "/?directConnection=true"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	s, err := NewStore(c.Database(base.items.Database().Name()), StoreOptions{Replica: "cut", DeadAfter: time.Second, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	mustPut(t, base, "cut", 1)
	if _, err := s.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecoverKeys(ctx); err != nil {
		t.Fatal(err)
	}
	p.silence()
	passes := map[string]func() error{
		"Heartbeat":      func() error { _, err := s.Heartbeat(ctx); return err },
		"RecoverPending": func() error { _, err := s.RecoverPending(ctx, 0); return err },
		"RecoverKeys":    func() error { _, err := s.RecoverKeys(ctx); return err },
	}
	for name, pass := range passes {
		done := make(chan error, 1)
		go func() { done <- pass() }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s on a silent link: %v, want its deadline exceeded", name, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s on a silent link still blocked after a minute", name)
		}
	}
}
