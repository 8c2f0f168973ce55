package drill

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// The network faults: they strike one replica's links to its stores,
// through the proxies the env puts between them (env.Options.Network).
const (
	LockPartition  = "lock-partition"  // the lock holder cut off from its lock store for twice the TTL
	StorePartition = "store-partition" // a replica cut off from MongoDB for storePartition under load
	RedisPartition = "redis-partition" // a replica cut off from Redis for storePartition under load
	Latency        = "latency"         // latencyAdded ± latencyJitter on a replica's store links for networkFault
	Resets         = "resets"          // a replica's store connections closed after every resetBytes of replies, for networkFault
)

// Shapes of the network faults.
const (
	storePartition = 3 * time.Second
	networkFault   = 4 * time.Second
	latencyAdded   = 350 * time.Millisecond
	latencyJitter  = 150 * time.Millisecond
	// resetBytes is counted on each connection on its own, so it must be
	// small enough that a slow replica's connections reach it: a loaded
	// machine answers fewer requests, spread over more pooled connections.
	// At 8 KiB, on a machine at load 15 (13 requests/s), atomic saw 0 or 1
	// lost answers in 4 s; at 1 KiB, 32 in each of 3 runs.
	resetBytes = 1 << 10
)

// networkFaults are the faults that need the env's proxies.
var networkFaults = []string{LockPartition, StorePartition, RedisPartition, Latency, Resets, NATSAckLoss, NATSCut}

// NeedsNetwork reports whether faults need every replica's store links
// behind proxies (env.Options.Network).
func NeedsNetwork(faults []string) bool {
	return slices.ContainsFunc(faults, func(f string) bool { return slices.Contains(networkFaults, f) })
}

// lockLink is the store link a strategy's lock lives behind, "" for none
// the env proxies (local, redlock's own servers).
func lockLink(name string) env.Link {
	if in, ok := strategy.Lookup(name); ok && slices.Contains(env.Links, env.Link(in.Lock)) {
		return env.Link(in.Lock)
	}
	return ""
}

// lockPartitionDrills: every lock strategy whose lock store the env
// proxies, with fencing on: the holder loses its lock store, its lease
// runs out, another replica takes the lock; then the link heals.
func lockPartitionDrills() []Drill {
	proxied := slices.DeleteFunc(slices.Clone(FencedStrategies), func(s string) bool { return lockLink(s) == "" })
	return over(proxied, Drill{Label: "lock store partition", Inject: PartitionLockStore})
}

// PartitionLockStore cuts the lock holder off from the store its lock
// lives in (Redis, etcd, or MongoDB for mongo-lease, which is also its
// stock store) for twice the TTL, then heals the link. The lease cannot
// be refreshed and runs out; another replica takes the lock and sells;
// the cut-off holder must not write after it.
var PartitionLockStore = strike(func(f *Ctx) error {
	return unless(lockLink(f.Strategy) != "", "%s has no lock store behind a proxy", f.Strategy)
}, func(ctx context.Context, f *Ctx, i int, how string) (*Event, error) {
	return cutOff(ctx, f, i, lockLink(f.Strategy), string(lockLink(f.Strategy)), 2*f.TTL, how)
})

// PartitionRedis cuts a replica (by turn, or the lock holder) off from
// Redis for storePartition under load, then heals: redis-stock's takes,
// loads and clearings in flight lose their answers, while its batch
// writes to MongoDB go on. Its drill is redis-stock's, the strategy that
// keeps its stock in Redis (the lock partition cuts the lock strategies
// off from theirs; latency and resets strike every link, Redis's too).
var PartitionRedis = strike(nil, func(ctx context.Context, f *Ctx, i int, how string) (*Event, error) {
	return cutOff(ctx, f, i, env.LinkRedis, "Redis", storePartition, how)
})

// PartitionStore cuts a replica (the lock holder, or one by turn) off from
// MongoDB for storePartition under load, then heals: stock and ledger
// writes in flight lose their answers (outcome unknown, pending orders,
// recovery), and reads and fenced reads find no server.
var PartitionStore = strike(nil, func(ctx context.Context, f *Ctx, i int, how string) (*Event, error) {
	return cutOff(ctx, f, i, env.LinkMongo, "MongoDB", storePartition, how)
})

// cutOff partitions replica i's link to the store called name for d.
func cutOff(ctx context.Context, f *Ctx, i int, link env.Link, name string, d time.Duration, how string) (*Event, error) {
	id := f.Env.ID(i)
	return onLinks(ctx, f, i, d, "partition replica "+id, "",
		fmt.Sprintf("replica %s cut off from %s for %s (%s)", id, name, d, how), func() error { return f.Env.Partition(i, link) })
}

// onLinks strikes replica i's store links with hit (doing what, for an
// error) for d, then heals them, waiting d whatever ctx does: a replica
// must not stay cut off.
func onLinks(ctx context.Context, f *Ctx, i int, d time.Duration, doing, shape, note string, hit func() error) (*Event, error) {
	at := time.Now()
	if err := hit(); err != nil {
		return nil, fmt.Errorf("%s: %w", doing, err)
	}
	time.Sleep(d)
	if err := f.Env.Heal(context.WithoutCancel(ctx), i); err != nil {
		return nil, fmt.Errorf("heal replica %s: %w", f.Env.ID(i), err)
	}
	return &Event{At: at, Healed: time.Now(), Victim: f.Env.ID(i), Shape: shape, Note: note}, nil
}

// SlowLinks adds latencyAdded ± latencyJitter to every reply on a
// replica's store links for networkFault.
var SlowLinks = strike(nil, func(ctx context.Context, f *Ctx, i int, how string) (*Event, error) {
	id := f.Env.ID(i)
	return onLinks(ctx, f, i, networkFault, "slow replica "+id+"'s links",
		fmt.Sprintf("%d±%d ms", latencyAdded.Milliseconds(), latencyJitter.Milliseconds()),
		fmt.Sprintf("replica %s's store links +%s ± %s for %s (%s)", id, latencyAdded, latencyJitter, networkFault, how),
		func() error { return f.Env.Slow(i, latencyAdded, latencyJitter) })
})

// ResetLinks closes each of a replica's store connections once resetBytes
// of replies have passed on it, for networkFault: under load, connections
// die mid-reply at a steady rate, and the drivers dial again.
var ResetLinks = strike(nil, func(ctx context.Context, f *Ctx, i int, how string) (*Event, error) {
	id := f.Env.ID(i)
	return onLinks(ctx, f, i, networkFault, "reset replica "+id+"'s links", fmt.Sprintf("every %d KiB", resetBytes>>10),
		fmt.Sprintf("replica %s's store connections closed after every %d KiB of replies for %s (%s)", id, resetBytes>>10, networkFault, how),
		func() error { return f.Env.CutAfter(i, resetBytes) })
})
