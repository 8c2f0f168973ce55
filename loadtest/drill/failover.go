package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
)

// RedisLockKey is the Redis key of sku's redis-lock lease as the service
// names it (redislock's default prefix around the item's lock key). Its
// hash tag, the item's lock key, decides the cluster slot of all the
// lock's keys.
func RedisLockKey(sku string) string {
	return redislock.DefaultKeyPrefix + "{" + inventory.LockKey(sku) + "}"
}

// NeedsRedisCluster reports whether faults need the replicas on a Redis
// Cluster.
func NeedsRedisCluster(faults []string) bool { return slices.Contains(faults, RedisFailover) }

// failoverDrills: the redis-lock across a master's failover, with fencing
// on, and off as a demonstration of what the fence stops.
func failoverDrills() []Drill {
	return []Drill{
		{Label: "redis failover", Strategy: "redis-lock", Inject: FailoverRedisMaster},
		{Label: "redis failover, fencing off", Strategy: "redis-lock", Demo: true, Flags: Flags{All: []string{"--fencing=false"}}, Inject: FailoverRedisMaster},
	}
}

// FailoverRedisMaster kills (SIGKILL) the Redis Cluster master serving the
// hot sku's lock key while a replica of the service holds the lock, and
// promotes that master's replica at once with CLUSTER FAILOVER FORCE; then
// it watches the replicas' /healthz for three TTLs for two holders at once.
//
// Asynchronous replication is the point: a promoted replica that had not
// seen the last grant grants the key again while its holder still works
// under it. The drill reads the lease on the master and on its replica
// just before the kill and says whether the replica had it. On loopback a
// replica is well under a millisecond behind, so it nearly always has:
// the drill then measures the stall and what the clients do across a
// failover, and the clock drill (redis-clock) shows what a lost lease does.
//
// Why FORCE, not the cluster's own election: the election starts only
// after the node timeout (2 s here) plus a random delay, longer than a
// drill's lease (1 s), so every lease would have run out before the
// replica served, the opposite of production's proportions (node timeout
// 15 s, leases of 30 s). FORCE promotes in milliseconds, with the other
// masters' votes, at a time the drill controls; the stall measured is then
// the lock's and the clients' recovery, not the failure detector's. After
// the attack the killed node starts again, empty, and rejoins as the new
// master's replica, so that the next drill starts with six nodes.
func FailoverRedisMaster(ctx context.Context, f *Ctx) (*Event, error) {
	c := f.Env.Cluster
	if c == nil || c.Kind != devstore.KindRedisServer {
		return nil, fmt.Errorf("%w: needs the Redis Cluster the harness starts (--redis-cluster, without REDIS_CLUSTER_ADDRS)", env.ErrUnsupported)
	}
	if len(f.SKUs) == 0 {
		return nil, errors.New("redis failover: no sku to find the lock of")
	}
	_, how, err := f.victim(ctx)
	if err != nil {
		return nil, err
	}
	key := RedisLockKey(f.SKUs[0])
	master, err := c.MasterOf(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("redis failover: %w", err)
	}
	replica, err := c.Replica(ctx, master)
	if err != nil {
		return nil, fmt.Errorf("redis failover: %w", err)
	}
	lag := compareLease(ctx, master, replica, key)
	at := time.Now()
	if err := c.Kill(master); err != nil {
		return nil, fmt.Errorf("redis failover: kill master %s: %w", master, err)
	}
	if err := promote(ctx, replica); err != nil {
		return nil, fmt.Errorf("redis failover: promote %s: %w", replica, err)
	}
	promoteAt := time.Now()
	if err := waitServing(ctx, c, key, replica); err != nil {
		return nil, fmt.Errorf("redis failover: %w", err)
	}
	healed := time.Now()
	ev := &Event{At: at, Healed: healed,
		Note: fmt.Sprintf("killed Redis master %s (SIGKILL; it served %s, the hot sku's lock); its replica %s took over (CLUSTER FAILOVER FORCE after %s, serving the slot after %s); %s; %s",
			master, key, replica, promoteAt.Sub(at).Round(time.Millisecond), healed.Sub(at).Round(time.Millisecond), lag, how),
		Cleanup: func(ctx context.Context) error { return c.StartNode(ctx, master) },
	}
	ev.DoubleHeld, err = f.countDoubleHeld(ctx, 3*f.TTL)
	return ev, err
}

// compareLease reads key on master and on its replica (READONLY) and
// says whether the replica has the master's lease.
func compareLease(ctx context.Context, master, replica, key string) string {
	mc := redis.NewClient(&redis.Options{Addr: master, MaxRetries: -1, DialTimeout: time.Second})
	defer mc.Close()
	rc := redis.NewClient(&redis.Options{Addr: replica, MaxRetries: -1, DialTimeout: time.Second,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }})
	defer rc.Close()
	mv, merr := mc.Get(ctx, key).Result()
	rv, rerr := rc.Get(ctx, key).Result()
	switch {
	case errors.Is(merr, redis.Nil):
		return "the lease was free on the master"
	case merr != nil || (rerr != nil && !errors.Is(rerr, redis.Nil)):
		return fmt.Sprintf("lease not compared (%v, %v)", merr, rerr)
	case mv == rv:
		return "the replica had the master's lease (" + tokenOf(mv) + ")"
	case errors.Is(rerr, redis.Nil):
		return "the replica lacked the master's lease (" + tokenOf(mv) + ")"
	default:
		return fmt.Sprintf("the replica lacked the master's lease (master %s, replica %s)", tokenOf(mv), tokenOf(rv))
	}
}

// tokenOf is the token of a lease value "<token>:<owner>".
func tokenOf(v string) string {
	for i := range len(v) {
		if v[i] == ':' {
			return "token " + v[:i]
		}
	}
	return v
}

// promote makes replica a master with CLUSTER FAILOVER FORCE (its master
// is dead: no handshake with it), retrying while the replica still
// refuses (it has just lost its link).
func promote(ctx context.Context, replica string) error {
	rc := redis.NewClient(&redis.Options{Addr: replica, MaxRetries: -1, DialTimeout: time.Second})
	defer rc.Close()
	var err error
	for range 50 {
		if err = rc.Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err(); err == nil {
			return nil
		}
		if serr := Sleep(ctx, 20*time.Millisecond); serr != nil {
			return serr
		}
	}
	return err
}

// waitServing waits until the cluster names replica as the master of
// key's slot.
func waitServing(ctx context.Context, c *devstore.RedisCluster, key, replica string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		m, err := c.MasterOf(ctx, key)
		if err == nil && m == replica {
			return nil
		}
		if serr := Sleep(ctx, 5*time.Millisecond); serr != nil {
			return fmt.Errorf("%s did not take over %s: %w (last: %v, %v)", replica, key, serr, m, err)
		}
	}
}
