package devstore_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
)

// TestRedisCluster starts a cluster (or takes REDIS_CLUSTER_ADDRS), writes
// through a cluster client, fails a master over by command and another by a
// kill, and checks that the client keeps working and the killed node
// rejoins.
func TestRedisCluster(t *testing.T) {
	c := devstoretest.RedisCluster(t)
	ctx := t.Context()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cc.Close() })

	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind == devstore.KindRedisServer && (len(c.Addrs) != 6 || len(masters) != 3) {
		t.Fatalf("%d nodes, masters %v; want 6 nodes, 3 masters", len(c.Addrs), masters)
	}
	// Keys spread over every master.
	seen := map[string]bool{}
	for i := 0; len(seen) < len(masters) && i < 100; i++ {
		key := "devstore-cluster:" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m, err := c.MasterOf(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(masters, m) {
			t.Fatalf("MasterOf(%s) = %s, not among %v", key, m, masters)
		}
		seen[m] = true
	}
	if len(seen) != len(masters) {
		t.Fatalf("keys landed on %d of %d masters", len(seen), len(masters))
	}

	if c.Kind != devstore.KindRedisServer {
		if err := c.Kill(c.Addrs[0]); !errors.Is(err, devstore.ErrCannotRestart) {
			t.Errorf("Kill on an external cluster = %v, want ErrCannotRestart", err)
		}
		return
	}

	// A coordinated failover keeps the data.
	const key = "devstore-cluster:failover"
	if err := cc.Set(ctx, key, "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := c.Failover(ctx, old)
	if err != nil {
		t.Fatalf("Failover(%s): %v", old, err)
	}
	if m, err := c.MasterOf(ctx, key); err != nil || m != promoted || m == old {
		t.Fatalf("after Failover(%s): master of the key %s, %v; want %s", old, m, err, promoted)
	}
	if v, err := cc.Get(ctx, key).Result(); err != nil || v != "kept" {
		t.Errorf("GET after a failover = %q, %v; want kept", v, err)
	}

	// A killed master is replaced by its replica: the one demoted above.
	promoted2, err := c.KillMaster(ctx, promoted)
	if err != nil {
		t.Fatalf("KillMaster(%s): %v", promoted, err)
	}
	if promoted2 != old {
		t.Errorf("KillMaster(%s) promoted %s, want %s", promoted, promoted2, old)
	}
	// A new client finds the new master. (One that was connected to the
	// killed master keeps dialling it until it reloads its slot map.)
	after := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = after.Close() })
	if v, err := after.Get(ctx, key).Result(); err != nil || v != "kept" {
		t.Errorf("GET after a kill = %q, %v; want kept", v, err)
	}
	if _, err := c.Replica(ctx, promoted2); !errors.Is(err, devstore.ErrNoReplica) {
		t.Errorf("Replica of a master whose replica is down = %v, want ErrNoReplica", err)
	}
	if err := c.StartNode(ctx, promoted); err != nil {
		t.Fatalf("StartNode(%s): %v", promoted, err)
	}
	if r, err := c.Replica(ctx, promoted2); err != nil || r != promoted {
		t.Errorf("Replica(%s) after StartNode = %s, %v; want %s", promoted2, r, err, promoted)
	}
}

func TestRedisClusterSkipsWithoutRedisServer(t *testing.T) {
	t.Setenv("REDIS_CLUSTER_ADDRS", "")
	t.Setenv("PATH", t.TempDir())
	if _, err := devstore.StartRedisCluster(t.Context(), devstoretest.Logger(t)); !errors.Is(err, devstore.ErrNoRedisServer) {
		t.Fatalf("StartRedisCluster without redis-server = %v, want ErrNoRedisServer", err)
	}
}
