package server_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

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
	var (
		mu     sync.Mutex // ForEachMaster calls the function concurrently
		fences []string
	)
	err := cc.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, redislock.DefaultKeyPrefix+"{*cluster-1*}"+redislock.DefaultFenceSuffix).Result()
		mu.Lock()
		fences = append(fences, keys...)
		mu.Unlock()
		return err
	})
	if err != nil || len(fences) != 1 {
		t.Errorf("fence keys of cluster-1 on the cluster: %v, %v; want one", fences, err)
	}
}
