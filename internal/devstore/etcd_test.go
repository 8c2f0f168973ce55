package devstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/internal/testskip"
)

func TestEtcdEmbedded(t *testing.T) {
	t.Setenv("ETCD_ENDPOINTS", "")
	start := time.Now()
	e, err := devstore.StartEtcd(t.Context(), devstoretest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("embedded etcd at %v ready in %v", e.Endpoints, time.Since(start))
	if e.Kind != devstore.KindEmbeddedEtcd || len(e.Endpoints) != 1 {
		t.Fatalf("kind %s, endpoints %v; want one %s member", e.Kind, e.Endpoints, devstore.KindEmbeddedEtcd)
	}
	c, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	if _, err := c.Put(ctx, "before", "1"); err != nil {
		t.Fatalf("put: %v", err)
	}
	// The short election timeout lowers the lease floor to one second.
	g, err := c.Grant(ctx, 1)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	if g.TTL != 1 {
		t.Errorf("granted TTL %d for a 1 s lease, want 1", g.TTL)
	}
	// An open watch stream must not hold Close up.
	wch := c.Watch(ctx, "before")
	_ = wch

	if err := e.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	// The same client reconnects to the same address; the data survived.
	r, err := c.Get(ctx, "before")
	if err != nil {
		t.Fatalf("get after Restart: %v", err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "1" {
		t.Errorf("get after Restart = %v, want before=1", r.Kvs)
	}

	closing := time.Now()
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(closing); d > 3*time.Second {
		t.Errorf("Close took %v with a client open, want well under the server's 7 s wait", d)
	}
	if _, err := e.Client(); err == nil {
		t.Error("Client after Close succeeded")
	}
}

func TestEtcdExternal(t *testing.T) {
	t.Setenv("ETCD_ENDPOINTS", "")
	own := devstoretest.Etcd(t)
	t.Setenv("ETCD_ENDPOINTS", own.Endpoints[0])

	e := devstoretest.Etcd(t)
	if e.Kind != devstore.KindExternal || len(e.Endpoints) != 1 || e.Endpoints[0] != own.Endpoints[0] {
		t.Fatalf("got %s at %v, want %s at %v", e.Kind, e.Endpoints, devstore.KindExternal, own.Endpoints)
	}
	if err := e.Restart(t.Context()); !errors.Is(err, devstore.ErrCannotRestart) {
		t.Errorf("Restart: got %v, want ErrCannotRestart", err)
	}
	if err := e.Kill(0); !errors.Is(err, devstore.ErrCannotRestart) {
		t.Errorf("Kill: got %v, want ErrCannotRestart", err)
	}
	c := devstoretest.EtcdClient(t, e)
	if _, err := c.Put(t.Context(), "external", "1"); err != nil {
		t.Fatalf("put through the external endpoints: %v", err)
	}

	t.Setenv("ETCD_ENDPOINTS", "http://127.0.0.1:1")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := devstore.StartEtcd(ctx, devstoretest.Logger(t)); err == nil {
		t.Error("StartEtcd with a dead ETCD_ENDPOINTS succeeded")
	}
}

// TestEtcdClusterKillLeader kills the leader of a three-member cluster:
// the others elect a new one and a client of all three keeps writing.
func TestEtcdClusterKillLeader(t *testing.T) {
	testskip.Long(t, "starts a three-member cluster")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e, err := devstore.StartEtcdCluster(ctx, devstoretest.Logger(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if len(e.Endpoints) != 3 {
		t.Fatalf("endpoints %v, want 3", e.Endpoints)
	}
	c := devstoretest.EtcdClient(t, e)
	if _, err := c.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}

	leader, err := e.Leader()
	if err != nil || leader < 0 {
		t.Fatalf("Leader = %d, %v", leader, err)
	}
	killed := time.Now()
	if err := e.Kill(leader); err != nil {
		t.Fatalf("Kill(%d): %v", leader, err)
	}
	// A write through the client succeeds once a new leader is elected.
	var put error
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, put = c.Put(pctx, "k", "after")
		pcancel()
		if put == nil || ctx.Err() != nil {
			break
		}
	}
	if put != nil {
		t.Fatalf("no write succeeded after the leader was killed: %v", put)
	}
	t.Logf("killed leader m%d; the next write succeeded %v later", leader, time.Since(killed))
	if l, _ := e.Leader(); l == leader || l < 0 {
		t.Errorf("leader after the kill = %d", l)
	}

	if err := e.Start(ctx, leader); err != nil {
		t.Fatalf("Start(%d): %v", leader, err)
	}
	// The restarted member has caught up: a serializable read from it
	// alone sees the write made while it was down.
	one, err := clientv3.New(devstore.ClientConfig([]string{e.Endpoints[leader]}))
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	for {
		r, err := one.Get(ctx, "k", clientv3.WithSerializable())
		if err == nil && len(r.Kvs) == 1 && string(r.Kvs[0].Value) == "after" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("restarted member never caught up: %v %v", r, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
