package mongogate

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// silentUpstream accepts connections and reads everything sent to it, but
// never answers: an upstream whose writes never end. got yields each
// connection's bytes as they arrive; closed yields one value per
// connection the gate closed.
type silentUpstream struct {
	ln     net.Listener
	got    chan []byte
	closed chan struct{}
	wg     sync.WaitGroup
}

func startSilentUpstream(t *testing.T) *silentUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &silentUpstream{ln: ln, got: make(chan []byte, 100), closed: make(chan struct{}, 100)}
	u.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						u.got <- bytes.Clone(buf[:n])
					}
					if err != nil {
						u.closed <- struct{}{}
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { _ = ln.Close(); u.wg.Wait() })
	return u
}

// send opens a raw client connection to the gate and sends msg on it.
func send(t *testing.T, g *Gate, msg []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	return c
}

// within waits for ch to yield, failing the test after a generous bound:
// every wait here is for something the gate does on its own, not for a
// timing.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("gave up waiting: %s", what)
		panic("unreachable")
	}
}

func quiet[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("unexpected: %s", what)
	case <-time.After(200 * time.Millisecond):
	}
}

func updateMsg(t *testing.T, id string) []byte {
	return opMsgBytes(t, 0, bodySection(t, bson.D{
		{Key: "update", Value: "c"}, {Key: "$db", Value: "d"},
		{Key: "updates", Value: bson.A{bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: id}}}, {Key: "u", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}}}}},
	}))
}

func findMsg(t *testing.T) []byte {
	return opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "find", Value: "c"}, {Key: "$db", Value: "d"}}))
}

// TestHungWriteIsCut: a write whose client hung up and whose upstream never
// answers keeps its document only until HungWriteLimit; then the gate
// closes its upstream connection, counts it, and the next write to the
// document goes through.
func TestHungWriteIsCut(t *testing.T) {
	t.Parallel()
	u := startSilentUpstream(t)
	g := startGateWith(t, u.ln.Addr().String(), Options{HungWriteLimit: 300 * time.Millisecond})

	first := send(t, g, updateMsg(t, "k"))
	within(t, u.got, "the first write forwarded")
	// The same document from another client waits for the first.
	second := send(t, g, updateMsg(t, "k"))
	quiet(t, u.got, "a second write to the document forwarded while the first held it")

	_ = first.Close()
	within(t, u.closed, "the hung write's upstream connection closed")
	within(t, u.got, "the second write forwarded once the hung write was cut")
	if s := g.Stats(); s.Abandoned != 1 || s.Documents != 1 {
		t.Errorf("after the cut: %+v; want 1 abandoned and 1 document held (the second write's)", s)
	}
	_ = second.Close()
	within(t, u.closed, "the second write's upstream connection closed")
	for deadline := time.Now().Add(10 * time.Second); g.Stats().Documents != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("documents still held: %+v", g.Stats())
		}
	}
}

// TestInFlightBound: past MaxInFlight, a request waits in the gate; one
// whose client hangs up while it waits is dropped without reaching the
// upstream; the handshake commands pass the bound; a slot comes back
// when its connection closes.
func TestInFlightBound(t *testing.T) {
	t.Parallel()
	u := startSilentUpstream(t)
	g := startGateWith(t, u.ln.Addr().String(), Options{MaxInFlight: 1})

	a := send(t, g, findMsg(t))
	within(t, u.got, "the first find forwarded")
	if s := g.Stats(); s.InFlight != 1 {
		t.Fatalf("in flight %d, want 1", s.InFlight)
	}

	b := send(t, g, findMsg(t))
	w := send(t, g, updateMsg(t, "k"))
	quiet(t, u.got, "a request forwarded past the bound")
	hello := send(t, g, opMsgBytes(t, 0, bodySection(t, bson.D{{Key: "hello", Value: 1}, {Key: "$db", Value: "admin"}})))
	within(t, u.got, "a hello forwarded past the bound")
	_ = hello.Close()
	within(t, u.closed, "the hello's connection closed")

	_ = b.Close()
	_ = w.Close()
	within(t, u.closed, "a waiting request's connection closed")
	within(t, u.closed, "a waiting request's connection closed")
	for deadline := time.Now().Add(10 * time.Second); g.Stats().Dropped != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("requests of clients who hung up while they waited not dropped: %+v", g.Stats())
		}
	}
	quiet(t, u.got, "a request of a client who hung up forwarded")
	if s := g.Stats(); s.Documents != 0 || s.Writes != 0 {
		t.Errorf("after the waiting write's client hung up: %+v; want no document held and no write forwarded", s)
	}

	_ = a.Close()
	within(t, u.closed, "the first find's connection closed")
	send(t, g, findMsg(t))
	within(t, u.got, "a find forwarded once the slot came back")
}
