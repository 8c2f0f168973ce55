package server_test

import (
	"net/http"
	"testing"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
)

// TestRedisClusterReplica: a replica configured with a Redis Cluster instead
// of one Redis serves redis-lock, fenced, and reports the cluster ready.
func TestRedisClusterReplica(t *testing.T) {
	cluster := devstoretest.RedisCluster(t)
	cfg := testConfig(t, "rc")
	cfg.RedisAddr = ""
	cfg.RedisCluster = cluster.Addrs
	h := newServer(t, cfg).Handler()

	if rec, item := call(t, h, http.MethodPut, "/v1/items/cluster-1", jsonCT, `{"stock": 2}`); rec.Code != 200 {
		t.Fatalf("PUT: %d %v", rec.Code, item)
	}
	var lastFence float64
	for want := 1.0; want >= 0; want-- {
		rec, sale := call(t, h, http.MethodPost, "/v1/items/cluster-1/decrement", jsonCT, `{"qty": 1, "strategy": "redis-lock"}`)
		if rec.Code != 200 || sale["remaining"] != want || sale["strategy"] != "redis-lock" {
			t.Fatalf("redis-lock decrement on a cluster: %d %v", rec.Code, sale)
		}
		fence, _ := sale["fence"].(float64)
		if fence <= lastFence {
			t.Errorf("fence %v is not above the last one, %v", fence, lastFence)
		}
		lastFence = fence
	}
	if rec, rz := call(t, h, http.MethodGet, "/readyz", "", ""); rec.Code != 200 || rz["checks"].(map[string]any)["redis"] != "ok" {
		t.Fatalf("readyz: %d %v", rec.Code, rz)
	}
	// The lock's fence counter is on the cluster: it was the lock used.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs})
	defer cc.Close()
	// The fence counter of the replica's redis-lock key for the item,
	// named as the backend names it, under the replica's database.
	fenceKey := redislock.KeyName(redislock.KeyPrefix(cfg.DB), strategy.LockKey("cluster-1")) + redislock.DefaultFenceSuffix
	if n, err := cc.Exists(t.Context(), fenceKey).Result(); err != nil || n != 1 {
		t.Errorf("EXISTS %s on the cluster: %d, %v; want 1", fenceKey, n, err)
	}
}
