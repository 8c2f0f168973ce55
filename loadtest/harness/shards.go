package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/loadtest/drill"
	"github.com/stocklock/stocklock/loadtest/report"
)

// shardsOf returns, for a redis-lock comparison run on the Redis Cluster
// the env started, the master serving each sku's lock key (the slot of the
// key's hash tag, by the cluster's own slot map); nil for any other run.
// A map that cannot be read is noted and left out: the load is measured
// all the same.
func (h *Harness) shardsOf(ctx context.Context, name string, skus []string, drilled bool) map[string]string {
	if in, _ := strategy.Lookup(name); drilled || in.Lock != strategy.LockRedis || h.env == nil || h.env.Cluster == nil {
		return nil
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: h.env.Cluster.Addrs, DialTimeout: time.Second})
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := make(map[string]string, len(skus))
	for _, sku := range skus {
		c, err := cc.MasterForKey(ctx, drill.RedisLockKey(sku))
		if err != nil {
			h.logf("note: no per-shard load: the master of %s: %v", drill.RedisLockKey(sku), err)
			return nil
		}
		out[sku] = c.Options().Addr
	}
	return out
}

// countShards fills run's per-shard load from the skus' masters: skus,
// requests and sales (acknowledged orders) by master.
func countShards(run *report.Run, shards map[string]string, obs *observed) {
	if shards == nil {
		return
	}
	run.SKUsByShard, run.RequestsByShard, run.SalesByShard = map[string]int{}, map[string]int{}, map[string]int{}
	for sku, m := range shards {
		run.SKUsByShard[m]++
		run.RequestsByShard[m] += obs.requests[sku]
		run.SalesByShard[m] += 0 // every master shows, one that sold nothing too
	}
	for _, o := range obs.acked {
		if m, ok := shards[o.SKU]; ok {
			run.SalesByShard[m]++
		} else {
			run.Problems = append(run.Problems, fmt.Sprintf("a sale of sku %q, which the run did not attack", o.SKU))
		}
	}
}
