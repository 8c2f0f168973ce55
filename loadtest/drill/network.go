package drill

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/loadtest/env"
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
var networkFaults = []string{LockPartition, StorePartition, RedisPartition, Latency, Resets}

// NeedsNetwork reports whether faults need every replica's store links
// behind proxies (env.Options.Network).
func NeedsNetwork(faults []string) bool {
	return slices.ContainsFunc(faults, func(f string) bool { return slices.Contains(networkFaults, f) })
}

// lockLink is the store link a strategy's lock lives behind, "" for none
// the env proxies (local, redlock's own servers).
func lockLink(name string) env.Link {
	in, ok := strategy.Lookup(name)
	if !ok {
		return ""
	}
	for _, l := range env.Links {
		if string(l) == in.Lock {
			return l
		}
	}
	return ""
}

// lockPartitionDrills: every lock strategy whose lock store the env
// proxies, with fencing on: the holder loses its lock store, its lease
// runs out, another replica takes the lock; then the link heals.
func lockPartitionDrills() []Drill {
	var ds []Drill
	for _, s := range FencedStrategies {
		if lockLink(s) != "" {
			ds = append(ds, Drill{Label: "lock store partition", Strategy: s, Inject: PartitionLockStore})
		}
	}
	return ds
}

// networkDrills returns a fault's drills over every safe strategy.
func networkDrills(label string, inject Injector) func() []Drill {
	return func() []Drill {
		var ds []Drill
		for _, s := range safeStrategies {
			ds = append(ds, Drill{Label: label, Strategy: s, Inject: inject})
		}
		return ds
	}
}

// PartitionLockStore cuts the lock holder off from the store its lock
// lives in (Redis, etcd, or MongoDB for mongo-lease, which is also its
// stock store) for twice the TTL, then heals the link. The lease cannot
// be refreshed and runs out; another replica takes the lock and sells;
// the cut-off holder must not write after it.
func PartitionLockStore(ctx context.Context, f *Ctx) (*Event, error) {
	link := lockLink(f.Strategy)
	if link == "" {
		return nil, fmt.Errorf("%w: %s has no lock store behind a proxy", env.ErrUnsupported, f.Strategy)
	}
	i, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	return cutFor(ctx, f, i, 2*f.TTL, fmt.Sprintf("replica %s cut off from %s for %s (%s)", f.Env.ID(i), link, 2*f.TTL, how), link)
}

// redisPartitionDrills: the strategies that keep their stock in Redis (the
// lock partition cuts the lock strategies off from theirs). Latency and
// resets strike every link of a replica, Redis's too.
func redisPartitionDrills() []Drill {
	return []Drill{{Label: "redis partition", Strategy: strategy.RedisStock, Inject: PartitionRedis}}
}

// PartitionRedis cuts a replica (by turn, or the lock holder) off from
// Redis for storePartition under load, then heals: redis-stock's takes,
// loads and clearings in flight lose their answers, while its batch
// writes to MongoDB go on.
func PartitionRedis(ctx context.Context, f *Ctx) (*Event, error) {
	i, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	return cutFor(ctx, f, i, storePartition, fmt.Sprintf("replica %s cut off from Redis for %s (%s)", f.Env.ID(i), storePartition, how), env.LinkRedis)
}

// PartitionStore cuts a replica (the lock holder, or one by turn) off from
// MongoDB for storePartition under load, then heals: stock and ledger
// writes in flight lose their answers (outcome unknown, pending orders,
// recovery), and reads and fenced reads find no server.
func PartitionStore(ctx context.Context, f *Ctx) (*Event, error) {
	i, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	return cutFor(ctx, f, i, storePartition, fmt.Sprintf("replica %s cut off from MongoDB for %s (%s)", f.Env.ID(i), storePartition, how), env.LinkMongo)
}

// cutFor partitions replica i's links for d, then heals them.
func cutFor(ctx context.Context, f *Ctx, i int, d time.Duration, note string, links ...env.Link) (*Event, error) {
	at := time.Now()
	if err := f.Env.Partition(i, links...); err != nil {
		return nil, fmt.Errorf("partition replica %s: %w", f.Env.ID(i), err)
	}
	return heal(ctx, f, i, at, d, note)
}

// heal waits d (even if ctx ends: a replica must not stay cut off), heals
// replica i's links and returns the event.
func heal(ctx context.Context, f *Ctx, i int, at time.Time, d time.Duration, note string) (*Event, error) {
	serr := Sleep(context.WithoutCancel(ctx), d)
	if err := f.Env.Heal(context.WithoutCancel(ctx), i); err != nil {
		return nil, fmt.Errorf("heal replica %s: %w", f.Env.ID(i), err)
	}
	if serr != nil {
		return nil, serr
	}
	return &Event{At: at, Healed: time.Now(), Victim: f.Env.ID(i), Note: note}, nil
}

// SlowLinks adds latencyAdded ± latencyJitter to every reply on a
// replica's store links for networkFault.
func SlowLinks(ctx context.Context, f *Ctx) (*Event, error) {
	i, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	at := time.Now()
	if err := f.Env.Slow(i, latencyAdded, latencyJitter); err != nil {
		return nil, fmt.Errorf("slow replica %s's links: %w", f.Env.ID(i), err)
	}
	ev, err := heal(ctx, f, i, at, networkFault, fmt.Sprintf("replica %s's store links +%s ± %s for %s (%s)", f.Env.ID(i), latencyAdded, latencyJitter, networkFault, how))
	if ev != nil {
		ev.Shape = fmt.Sprintf("%d±%d ms", latencyAdded.Milliseconds(), latencyJitter.Milliseconds())
	}
	return ev, err
}

// ResetLinks closes each of a replica's store connections once resetBytes
// of replies have passed on it, for networkFault: under load, connections
// die mid-reply at a steady rate, and the drivers dial again.
func ResetLinks(ctx context.Context, f *Ctx) (*Event, error) {
	i, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	at := time.Now()
	if err := f.Env.CutAfter(i, resetBytes); err != nil {
		return nil, fmt.Errorf("reset replica %s's links: %w", f.Env.ID(i), err)
	}
	ev, err := heal(ctx, f, i, at, networkFault, fmt.Sprintf("replica %s's store connections closed after every %d KiB of replies for %s (%s)", f.Env.ID(i), resetBytes>>10, networkFault, how))
	if ev != nil {
		ev.Shape = fmt.Sprintf("every %d KiB", resetBytes>>10)
	}
	return ev, err
}
