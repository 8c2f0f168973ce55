package mongostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/inventory"
)

// TestRedisStockWaitWithoutReplica: with Wait, a take that no Redis
// replica acknowledges (the shared Redis has none) is given back and the
// sale refused as store-unavailable, nothing sold: Redis holds the stock
// it loaded and nothing in flight, the item and the ledger are untouched.
func TestRedisStockWaitWithoutReplica(t *testing.T) {
	a := testStore(t)
	c := testRedis(t)
	info, err := c.Info(t.Context(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "connected_slaves:0") {
		t.Skip("the shared Redis has replicas: WAIT 1 would be answered")
	}
	rs := redisStockOn(t, a, c, RedisStockOptions{Wait: 20 * time.Millisecond})
	mustPut(t, a, "w", 5)
	_, err = rs.Decrement(t.Context(), inventory.Request{SKU: "w", Qty: 2})
	if !errors.Is(err, errNotReplicated) || !errors.Is(err, inventory.ErrStoreUnavailable) {
		t.Fatalf("a take no replica has: %v, want errNotReplicated as store-unavailable", err)
	}
	st, err := rs.State(t.Context(), "w")
	if err != nil {
		t.Fatal(err)
	}
	if st.Stock != 5 || st.Inflight != 0 || st.OldestSale >= 0 {
		t.Errorf("Redis after the refused take: %+v, want stock 5 (given back), nothing in flight", st)
	}
	checkRedisBooks(t, a, rs, "w", 5, nil)
}

// TestRedisStockCluster runs redis-stock on a Redis Cluster of three
// masters with a replica each (slow: skipped by -short).
//
// The keys of one sku share its hash tag: skus on every master sell
// exactly their stock from two replicas, and no script is refused for
// keys in two slots.
//
// Then the failover that asynchronous replication allows: the master of a
// sku's stock loses its replica's link (a full resync, delayed 5 s, is
// forced), takes 3 units the replica never receives, and is killed; its
// replica is promoted with a copy that holds 3 units the item no longer
// has. Selling on to sold out must still sell exactly the stock: the
// batch write's stock >= Σqty refuses what the stale copy admits, and the
// reload bumps the item's epoch. Meanwhile, WAIT 1 refuses a take that
// only the master holds, and gives its units back.
func TestRedisStockCluster(t *testing.T) {
	srv := devstoretest.RedisCluster(t)
	ctx := t.Context()
	client := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: srv.Addrs})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ra, rb := redisStockOn(t, a, client(), RedisStockOptions{}), redisStockOn(t, b, client(), RedisStockOptions{})

	t.Run("a sku on every master", func(t *testing.T) {
		masters, err := srv.Masters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		skus := map[string]string{} // master -> sku
		for i := 0; len(skus) < len(masters); i++ {
			if i == 1000 {
				t.Fatalf("skus found on %d of %d masters", len(skus), len(masters))
			}
			sku := fmt.Sprintf("m%d", i)
			m, err := srv.MasterOf(ctx, ra.keys(sku)[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := skus[m]; !ok {
				skus[m] = sku
			}
		}
		var wg sync.WaitGroup
		for _, sku := range skus {
			mustPut(t, a, sku, 6)
			wg.Go(func() {
				var c tally
				sellUntilSoldOut(t, &c, sku, 4, ra, rb)
				if len(c.sold) != 6 || len(c.errs) != 0 {
					t.Errorf("%s: sold %d, errors %v; want 6, none", sku, len(c.sold), c.errs)
				}
				checkRedisBooks(t, a, ra, sku, 0, c.sold)
			})
		}
		wg.Wait()
	})

	t.Run("failover to a replica that missed takes", func(t *testing.T) {
		if srv.Kind != devstore.KindRedisServer {
			t.Skip("kills a master: needs the cluster devstore starts, not REDIS_CLUSTER_ADDRS")
		}
		const sku, stock = "fo", 10
		mustPut(t, a, sku, stock)
		var c tally
		for range 2 {
			c.add(ra.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}))
		}
		key := ra.keys(sku)[0]
		master, err := srv.MasterOf(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		replica, err := srv.Replica(ctx, master)
		if err != nil {
			t.Fatal(err)
		}
		mc := redis.NewClient(&redis.Options{Addr: master, MaxRetries: -1})
		defer mc.Close()
		rc := redis.NewClient(&redis.Options{Addr: replica, MaxRetries: -1,
			OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }})
		defer rc.Close()
		stockOn := func(c *redis.Client) int64 {
			t.Helper()
			n, err := c.HGet(ctx, key, "stock").Int64()
			if err != nil {
				t.Fatalf("stock on %s: %v", c.Options().Addr, err)
			}
			return n
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			r, rerr := rc.HGet(ctx, key, "stock").Int64()
			if rerr == nil && r == stockOn(mc) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the replica never caught up with the master (%d, %v)", r, rerr)
			}
		}

		// Cut the replication link and overflow the backlog in the sku's
		// slot, in one transaction (the replica must not reconnect and
		// resume before the pad is written): it cannot resume, and waits
		// for a full sync, which Redis delays 5 s.
		if _, err := mc.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ClientKillByFilter(ctx, "TYPE", "replica")
			p.Set(ctx, key+":pad", strings.Repeat("x", 2<<20), time.Minute)
			return nil
		}); err != nil {
			t.Fatal(err)
		}

		// WAIT 1 on the master's connection: no replica has the take.
		rw := redisStockOn(t, a, client(), RedisStockOptions{Wait: 100 * time.Millisecond})
		if _, err := rw.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, errNotReplicated) {
			t.Fatalf("a take the resyncing replica lacks, with WAIT 1: %v, want errNotReplicated", err)
		}
		if got := stockOn(mc); got != stock-2 {
			t.Fatalf("the master's stock after the refused take: %d, want %d (given back)", got, stock-2)
		}

		for range 3 {
			c.add(ra.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}))
		}
		if len(c.sold) != 5 || len(c.errs) != 0 {
			t.Fatalf("before the failover: sold %d, errors %v; want 5, none", len(c.sold), c.errs)
		}
		if m, r := stockOn(mc), stockOn(rc); m != stock-5 || r != stock-2 {
			t.Fatalf("stock on the master %d, on the replica %d: want %d and %d (the replica missed 3 takes)", m, r, stock-5, stock-2)
		}
		before, err := ra.store.getDoc(ctx, ra.store.items, sku)
		if err != nil {
			t.Fatal(err)
		}

		if err := srv.Kill(master); err != nil {
			t.Fatal(err)
		}
		promoted := false
		for range 100 {
			if err := rc.Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err(); err == nil {
				promoted = true
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !promoted {
			t.Fatal("CLUSTER FAILOVER FORCE never accepted")
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if m, err := srv.MasterOf(ctx, key); err == nil && m == replica {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never took the slot of %s over", replica, key)
			}
		}
		// Every node agrees, so that a client asking any of them learns
		// the new master.
		if err := srv.WaitOK(ctx); err != nil {
			t.Fatal(err)
		}

		sellUntilSoldOut(t, &c, sku, 4, ra, rb)
		if len(c.sold) != stock || len(c.errs) != 0 {
			t.Errorf("sold %d, errors %v; want exactly the stock, %d, none", len(c.sold), c.errs, stock)
		}
		after, err := ra.store.getDoc(ctx, ra.store.items, sku)
		if err != nil {
			t.Fatal(err)
		}
		if after.Epoch <= before.Epoch {
			t.Errorf("epoch %d after the failover, %d before: the stale copy was never refused and reloaded", after.Epoch, before.Epoch)
		}
		// A cluster client may still map the slot to the dead master
		// (it learns the new one when a command fails): wait until a
		// read of the state gets through.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			_, err := ra.State(ctx, sku)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Redis state after the failover: %v", err)
			}
		}
		checkRedisBooks(t, a, ra, sku, 0, c.sold)
	})
}
