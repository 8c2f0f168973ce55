package env

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/devstore"
)

// echo starts a TCP server that sends back what it reads.
func echo(t *testing.T) string { return echoTo(t, io.Discard) }

// echoTo is echo, also writing what it reads to w.
func echoTo(t *testing.T, w io.Writer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, io.TeeReader(c, w)) }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line on c and reads it back, within a second.
func roundTrip(c net.Conn, r *bufio.Reader) error {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := r.ReadString('\n')
	return err
}

// TestNetworkFaults: through a replica's proxy, a partition stops traffic
// and its heal closes the connections that crossed it (new ones work); a
// latency's heal leaves the connections open.
func TestNetworkFaults(t *testing.T) {
	e := &Env{net: newNetwork(), procs: []*replicaProc{{id: "a"}}}
	t.Cleanup(func() { _ = e.net.Collection.Clear() })
	addr, err := e.proxy("a", LinkRedis, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	c, r := dial()
	if err := roundTrip(c, r); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}

	if err := e.Slow(0, 50*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, r); err != nil {
		t.Fatalf("under latency: %v", err)
	}
	if err := e.Heal(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, r); err != nil {
		t.Fatalf("after the latency healed, the connection: %v; want it kept", err)
	}

	if err := e.Partition(0, LinkRedis); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, r); err == nil {
		t.Fatal("a round trip crossed the partition")
	}
	if err := e.Heal(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("after the partition healed, the old connection: %v; want it closed", err)
	}
	c2, r2 := dial()
	if err := roundTrip(c2, r2); err != nil {
		t.Fatalf("a new connection after the heal: %v", err)
	}
	if err := e.Partition(0, LinkMongo); err == nil {
		t.Fatal("a partition of a link the replica does not have: no error")
	}
}

// TestDeafen: a deafened link still carries what the replica sends, and
// drops what comes back: the request lands, its answer is lost.
func TestDeafen(t *testing.T) {
	e := &Env{net: newNetwork(), procs: []*replicaProc{{id: "a"}}}
	t.Cleanup(func() { _ = e.net.Collection.Clear() })
	got := make(chanWriter, 4)
	addr, err := e.proxy("a", LinkNATS, echoTo(t, got))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	if err := roundTrip(c, r); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	<-got
	if err := e.Deafen(0, LinkNATS); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, r); err == nil {
		t.Fatal("an answer came back through a deafened link")
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("what the replica sent through a deafened link never arrived")
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestReplicaPortsAfterProxies: a new replica's proxies listen before its
// port is chosen, so no proxy can be handed the port its replica is about
// to bind (freePorts releases the ports it found).
func TestReplicaPortsAfterProxies(t *testing.T) {
	up := echo(t)
	e := &Env{net: newNetwork(), Mongo: &devstore.Mongo{URI: "mongodb://" + up}, Redis: &devstore.Redis{Addr: up},
		Etcd: &devstore.Etcd{Endpoints: []string{"http://" + up}}, NATS: &devstore.NATS{URL: "nats://" + up}}
	defer e.net.Collection.Clear()
	ports, err := e.replicaPorts(0, 3)
	if err != nil {
		t.Fatal(err)
	}
	listening := map[string]bool{}
	for _, p := range e.net.Collection.Proxies() {
		listening[p.Listen] = true
	}
	if len(listening) != 3*len(Links) {
		t.Fatalf("%d proxies listen once the ports are chosen, want %d (every link of 3 replicas)", len(listening), 3*len(Links))
	}
	for _, port := range ports {
		if listening[fmt.Sprintf("127.0.0.1:%d", port)] {
			t.Errorf("port %d is a proxy's", port)
		}
	}
}

// chanWriter sends each write to the channel.
type chanWriter chan string

func (c chanWriter) Write(b []byte) (int, error) {
	c <- string(b)
	return len(b), nil
}
