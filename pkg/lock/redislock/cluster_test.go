package redislock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/lock"
	"github.com/stocklock/stocklock/pkg/lock/locktest"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
)

// clusterT returns a Redis Cluster for the test (see devstoretest.RedisCluster:
// skipped without redis-server) and a key prefix whose keys are deleted
// from every master afterwards.
func clusterT(t *testing.T) (*devstore.RedisCluster, string) {
	t.Helper()
	srv := devstoretest.RedisCluster(t)
	prefix := "stocklock-test:" + randHex(4) + ":"
	t.Cleanup(func() {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: srv.Addrs})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			iter := m.Scan(ctx, 0, prefix+"*", 100).Iterator()
			for iter.Next(ctx) {
				_ = m.Del(ctx, iter.Val()).Err()
			}
			return iter.Err()
		})
	})
	return srv, prefix
}

func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestConformanceCluster runs the conformance suite on a Redis Cluster of
// three masters with a replica each, through go-redis's cluster client.
func TestConformanceCluster(t *testing.T) {
	srv, prefix := clusterT(t)
	locktest.Run(t, locktest.Harness{Backend: func(t *testing.T) lock.Backend {
		// Each call is a separate "process": its own cluster client, so
		// its own subscription, on a node of its own choosing.
		return newBackend(t, newClusterClient(t, srv.Addrs), redislock.WithKeyPrefix(prefix))
	}})
}

// TestClusterHandoffReachesEveryShard: a release on any master hands the
// key to a waiter of another process, whose one subscription is on one
// node, and the grant message reaches it. Keys are picked on every master,
// so at least two of the releases run on a node other than the
// subscriber's. The waiter never attempts again after queueing: only the
// message can hand it the grant.
func TestClusterHandoffReachesEveryShard(t *testing.T) {
	srv, prefix := clusterT(t)
	ctx := ctxFor(t, 30*time.Second)
	holder := newBackend(t, newClusterClient(t, srv.Addrs), redislock.WithKeyPrefix(prefix))
	waiting := newBackend(t, newClusterClient(t, srv.Addrs), redislock.WithKeyPrefix(prefix))

	masters, err := srv.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{} // master -> key
	for i := 0; len(keys) < len(masters); i++ {
		if i == 1000 {
			t.Fatalf("keys found on %d of %d masters", len(keys), len(masters))
		}
		key := "handoff-" + strconv.Itoa(i)
		m, err := srv.MasterOf(ctx, prefix+"{"+key+"}")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := keys[m]; !ok {
			keys[m] = key
		}
	}

	subscribed := false
	for m, key := range keys {
		token, err := holder.TryAcquire(ctx, key, "holder", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		w := waiting.Waiter(key, "waiter")
		defer w.Close()
		queued(t, ctx, w, 30*time.Second)
		if !subscribed {
			// The subscription's confirmation hints every waiter (a 0):
			// from then on, grants are heard.
			select {
			case tok := <-w.Granted():
				if tok != 0 {
					t.Fatalf("grant %d before any release", tok)
				}
			case <-ctx.Done():
				t.Fatal("the waiting backend's subscription was never confirmed")
			}
			subscribed = true
		}
		if err := holder.Release(ctx, key, "holder", token); err != nil {
			t.Fatal(err)
		}
		var got uint64
		for got == 0 {
			select {
			case got = <-w.Granted():
			case <-ctx.Done():
				t.Fatalf("no grant message for %s, released on master %s", key, m)
			}
		}
		if got <= token {
			t.Errorf("%s: granted token %d is not above the holder's %d", key, got, token)
		}
		if err := waiting.Release(ctx, key, "waiter", got); err != nil {
			t.Errorf("%s: the handed-over lease does not hold the key: %v", key, err)
		}
	}
}
