package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/loadtest/env"
	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
	"github.com/stocklock/stocklock/pkg/lock/redislock"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// RedisLockKey is the Redis key of sku's redis-lock lease as the env's
// replicas name it (under env.DB); its hash tag, the item's lock key,
// decides the cluster slot of all the lock's keys.
func RedisLockKey(sku string) string {
	return redislock.KeyName(redislock.KeyPrefix(env.DB), strategy.LockKey(sku))
}

// hotKey is the key whose master a failover kills: the hot sku's stock
// hash under redis-stock as the env's replicas name it (under env.DB; its
// hash tag decides the sku's slot), its lock otherwise.
func hotKey(name, sku string) string {
	if name == strategy.RedisStock {
		return mongostore.RedisStockKey(mongostore.RedisStockKeyPrefix(env.DB), sku)
	}
	return RedisLockKey(sku)
}

// NeedsRedisCluster reports whether faults need the replicas on a Redis
// Cluster.
func NeedsRedisCluster(faults []string) bool { return slices.Contains(faults, RedisFailover) }

// failoverDrills: the redis-lock across a master's failover to a replica
// in sync, and to one resyncing (it lacks the lease), with fencing on, and
// off as a demonstration. The holders stall 800ms after their lease check
// (as in clockJumpDrills), so that the promoted replica serves while the
// old holder still works under its lease.
//
// redis-stock across the same failovers of its stock's master: with its
// safe rule (the batch write's stock >= its sum refuses what a copy that
// lost takes admits); acknowledging after Redis, a demonstration of the
// sales a promoted replica forgets; and so with WAIT 1 after every take,
// the mitigation of that gap, still a demonstration (see redisRestartDrills).
func failoverDrills() []Drill {
	stall := []string{"--write-stall=800ms"}
	off := append(slices.Clone(stall), "--fencing=false")
	waited := []string{AckAfterRedis, "--redis-stock-wait=" + stockWait.String()}
	return []Drill{
		{Label: "redis failover", Strategy: strategy.RedisLock, Flags: Flags{All: stall}, Inject: FailoverRedisMaster},
		{Label: "redis failover, replica resyncing", Strategy: strategy.RedisLock, Flags: Flags{All: stall}, Inject: FailoverToResyncing},
		{Label: "redis failover, replica resyncing, fencing off", Strategy: strategy.RedisLock, Demo: true, Flags: Flags{All: off}, Inject: FailoverToResyncing},
		{Label: "redis failover", Strategy: strategy.RedisStock, Inject: FailoverRedisMaster},
		{Label: "redis failover, replica resyncing", Strategy: strategy.RedisStock, Inject: FailoverToResyncing},
		{Label: "redis failover, replica resyncing, ack after redis", Strategy: strategy.RedisStock, Demo: true,
			Flags: Flags{All: []string{AckAfterRedis}}, Inject: FailoverToResyncing},
		{Label: "redis failover, replica resyncing, ack after redis + WAIT 1", Strategy: strategy.RedisStock, Demo: true,
			Flags: Flags{All: waited}, Inject: FailoverToResyncing},
	}
}

const (
	// stockWait is the WAIT timeout of the redis-stock drill with WAIT 1:
	// a replica on loopback acknowledges within milliseconds.
	stockWait = 200 * time.Millisecond
	// Lags of redis-stock's resyncing failover: the master is killed once
	// the replica's copy misses stockLagUnits units the master took, or
	// after stockLagFor (with WAIT, no take stays on the master alone).
	stockLagUnits = 50
	stockLagFor   = 2 * time.Second
	// syncWait bounds the wait for a replica's replication link to be up
	// (a full sync waits repl-diskless-sync-delay, 5 s, for more replicas).
	syncWait = 20 * time.Second
)

// FailoverRedisMaster kills (SIGKILL) the Redis Cluster master serving the
// hot sku's lock key while a replica of the service holds the lock, and
// promotes that master's replica at once with CLUSTER FAILOVER FORCE; then
// it counts double holders for three TTLs (countDoubleHeld).
//
// Asynchronous replication is the point: a promoted replica that had not
// seen the last grant grants the key again while its holder still works
// under it. The note says whether the replica had the master's lease just
// before the kill. On loopback a replica in sync nearly always has (it is
// well under a millisecond behind): this drill measures the stall and the
// clients across a failover, FailoverToResyncing a replica without it.
//
// Why FORCE, not the cluster's own election: that starts after the node
// timeout (2 s here) plus a random delay, longer than a drill's lease (1
// s), so every lease would have run out before the replica served, the
// opposite of production's proportions (node timeout 15 s, leases of 30
// s). FORCE promotes in milliseconds, with the other masters' votes, when
// the drill says: the stall measured is the lock's and the clients', not
// the failure detector's. After the attack the killed node rejoins, empty,
// as the new master's replica, so that the next drill has six nodes.
var FailoverRedisMaster = failover(false)

// FailoverToResyncing is FailoverRedisMaster with the master's replica
// behind: the drill cuts the replication link and overflows the backlog
// (forceResync), so that the replica must wait for a full sync, which
// Redis delays by repl-diskless-sync-delay (5 s); its data stays as at the
// cut. The master is killed once it has granted the lock to a holder the
// replica does not know: the promoted replica lacks the current lease, the
// caveat of asynchronous replication made certain. (A replica too far
// behind for a partial resync is so in production too, and promotable.)
var FailoverToResyncing = failover(true)

func failover(resyncing bool) Injector {
	return strike(func(f *Ctx) error {
		if err := unless(f.Env.Cluster != nil && f.Env.Cluster.Kind == devstore.KindRedisServer,
			"needs the Redis Cluster the harness starts (--redis-cluster, without REDIS_CLUSTER_ADDRS)"); err != nil || len(f.SKUs) > 0 {
			return err
		}
		return errors.New("redis failover: no sku to find the lock of")
	}, func(ctx context.Context, f *Ctx, _ int, how string) (_ *Event, err error) {
		defer func() {
			if err != nil {
				err = fmt.Errorf("redis failover: %w", err)
			}
		}()
		c, key := f.Env.Cluster, hotKey(f.Strategy, f.SKUs[0])
		master, err := c.MasterOf(ctx, key)
		if err != nil {
			return nil, err
		}
		replica, err := c.Replica(ctx, master)
		if err != nil {
			return nil, err
		}
		if err := waitSynced(ctx, replica); err != nil {
			return nil, err
		}
		state, lagFor := "in sync", time.Duration(0)
		if resyncing {
			state, lagFor = "cut off, waiting for a full resync", 4*time.Second
			if f.Strategy == strategy.RedisStock {
				lagFor = stockLagFor
			}
			if err := forceResync(ctx, master, key); err != nil {
				return nil, err
			}
		}
		mc, rc := dial(master, false), dial(replica, true)
		// Wait for the replica to lag (or, in sync, for a holder); the note gets the last look.
		wait, look := max(lagFor, 2*time.Second), func() (string, bool) { return leaseLag(ctx, f, mc, rc, key, lagFor == 0) }
		if f.Strategy == strategy.RedisStock {
			wait, look = lagFor, func() (string, bool) { return stockLag(ctx, mc, rc, key) }
		}
		var lag string
		_, _ = until(ctx, wait, 2*time.Millisecond, func() (done bool, _ error) {
			lag, done = look()
			return done, nil
		})
		_, _ = mc.Close(), rc.Close()
		at := time.Now()
		if err := c.Kill(master); err != nil {
			return nil, fmt.Errorf("kill master %s: %w", master, err)
		}
		if err := promote(ctx, replica); err != nil {
			return nil, fmt.Errorf("promote %s: %w", replica, err)
		}
		promoteAt := time.Now()
		if err := waitServing(ctx, c, key, replica); err != nil {
			return nil, err
		}
		healed := time.Now()
		rejoined := ""
		if f.Strategy == strategy.RedisStock {
			// WAIT 1 needs a replica of the new master: the killed node
			// comes back at once, empty, as its replica (and syncs in
			// repl-diskless-sync-delay, 5 s), where the lock drills bring it
			// back after the attack.
			if err := c.StartNode(ctx, master); err != nil {
				return nil, fmt.Errorf("start %s again: %w", master, err)
			}
			rejoined = fmt.Sprintf("; %s rejoined as its replica after %s", master, time.Since(at).Round(time.Millisecond))
		}
		ev := &Event{At: at, Healed: healed,
			Note: fmt.Sprintf("killed Redis master %s (SIGKILL; it served %s, the hot sku's key); its replica %s (%s) took over (CLUSTER FAILOVER FORCE after %s, serving the slot after %s%s); %s; %s",
				master, key, replica, state, promoteAt.Sub(at).Round(time.Millisecond), healed.Sub(at).Round(time.Millisecond), rejoined, lag, how),
			Cleanup: func(ctx context.Context) error {
				// Back as the new master's replica, and in sync, so that the
				// next drill starts with six nodes and replicas that have
				// their masters' data.
				if err := c.StartNode(ctx, master); err != nil {
					return err
				}
				return waitSynced(ctx, master)
			},
		}
		if slices.Contains(LockStrategies, f.Strategy) {
			ev.DoubleHeld, err = f.countDoubleHeld(ctx, 3*f.TTL)
		}
		return ev, err
	})
}

// dial is a client of the Redis node at addr that does not retry, reading
// from it if it is a replica (readOnly).
func dial(addr string, readOnly bool) *redis.Client {
	o := &redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second}
	if readOnly {
		o.OnConnect = func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
	}
	return redis.NewClient(o)
}

// stockLag compares the stock of redis-stock's hash at key on the master
// and on its replica, says how many units the replica's copy misses (the
// master's takes it has not received), and whether that is stockLagUnits.
func stockLag(ctx context.Context, mc, rc *redis.Client, key string) (string, bool) {
	read := func(c *redis.Client) (epoch, stock int64, err error) {
		v, err := c.HMGet(ctx, key, "epoch", "stock").Result()
		if err != nil {
			return 0, 0, err
		}
		if v[0] == nil || v[1] == nil {
			return -1, 0, nil
		}
		epoch, _ = strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
		stock, _ = strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		return epoch, stock, nil
	}
	me, ms, merr := read(mc)
	re, rs, rerr := read(rc)
	switch {
	case merr != nil || rerr != nil:
		return fmt.Sprintf("copies not compared (%v, %v)", merr, rerr), false
	case me < 0:
		return "the stock was not loaded on the master", false
	case re != me:
		return fmt.Sprintf("the replica's copy was of another epoch (master %d, replica %d)", me, re), false
	case rs == ms:
		return fmt.Sprintf("the replica's copy was the master's (epoch %d, stock %d)", me, ms), false
	default:
		return fmt.Sprintf("the replica's copy missed %d units the master had taken (epoch %d: stock %d on the master, %d on the replica)", rs-ms, me, ms, rs), rs-ms >= stockLagUnits
	}
}

// forceResync cuts master's replication link (CLIENT KILL TYPE replica)
// and, in the same transaction, writes a 2 MiB pad into key's slot, more
// than its 1 MiB backlog, so that the replica, reconnecting at once,
// cannot resume. A transaction, not a pipeline: Redis reads a 2 MiB
// command over several turns of its event loop, and the replica,
// reconnecting in between, would resume before the pad is in the backlog.
func forceResync(ctx context.Context, master, key string) error {
	mc := dial(master, false)
	defer mc.Close()
	_, err := mc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ClientKillByFilter(ctx, "TYPE", "replica")
		p.Set(ctx, key+":failover-pad", strings.Repeat("x", 2<<20), time.Minute)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cut the replication of %s: %w", master, err)
	}
	return nil
}

// leaseLag says whether the replica had the master's lease on key, and
// whether a replica of the service holds the lock and (unless anyHolder)
// the master's lease is one the replica lacks.
func leaseLag(ctx context.Context, f *Ctx, mc, rc *redis.Client, key string, anyHolder bool) (text string, done bool) {
	i, herr := f.findHolder(ctx)
	mv, merr := mc.Get(ctx, key).Result()
	rv, rerr := rc.Get(ctx, key).Result()
	switch {
	case errors.Is(merr, redis.Nil):
		text = "the lease was free on the master"
	case merr != nil || (rerr != nil && !errors.Is(rerr, redis.Nil)):
		text = fmt.Sprintf("lease not compared (%v, %v)", merr, rerr)
	case mv == rv:
		text = "the replica had the master's lease (" + tokenOf(mv) + ")"
	case errors.Is(rerr, redis.Nil):
		text = "the replica lacked the master's lease (" + tokenOf(mv) + ", none on the replica)"
	default:
		text = fmt.Sprintf("the replica lacked the master's lease (master %s, replica %s)", tokenOf(mv), tokenOf(rv))
	}
	return text, herr == nil && i >= 0 && (anyHolder || strings.Contains(text, "lacked"))
}

// waitSynced waits until the replica at addr has its replication link up
// (its full sync done), for up to syncWait.
func waitSynced(ctx context.Context, addr string) error {
	rc := dial(addr, false)
	defer rc.Close()
	ctx, cancel := context.WithTimeout(ctx, syncWait)
	defer cancel()
	for {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && (strings.Contains(info, "master_link_status:up") || strings.Contains(info, "role:master")) {
			return nil
		}
		if serr := Sleep(ctx, 50*time.Millisecond); serr != nil {
			return fmt.Errorf("replica %s not in sync: %w (last: %v)", addr, serr, err)
		}
	}
}

// tokenOf is the token of a lease value "<token>:<owner>".
func tokenOf(v string) string {
	if token, _, ok := strings.Cut(v, ":"); ok {
		return "token " + token
	}
	return v
}

// promote makes replica a master with CLUSTER FAILOVER FORCE (its master
// is dead: no handshake with it), retrying while the replica still
// refuses (it has just lost its link).
func promote(ctx context.Context, replica string) error {
	rc := dial(replica, false)
	defer rc.Close()
	var err error
	if _, serr := until(ctx, 2*time.Second, 20*time.Millisecond, func() (bool, error) {
		err = rc.Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err()
		return err == nil, nil
	}); serr != nil {
		return serr
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
