package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// errNotReplicated is the cause of a redis-stock sale refused because no
// Redis replica acknowledged its take within RedisStockOptions.Wait: the
// take was given back, nothing was sold. It is wrapped with
// inventory.ErrStoreUnavailable.
var errNotReplicated = errors.New("mongostore: redis-stock take not acknowledged by a Redis replica in time")

// take runs take.lua for one sale of sku and returns its answer. After
// an error on a Redis Cluster it has the client learn the cluster's slot
// map again: a failover's promoted replica serves the slot now, and the
// client would otherwise keep dialling the dead master until its own
// periodic refresh (10 s). With a Wait, take.lua and WAIT 1 Wait go out in one pipeline on one connection
// to the master of the sku's slot (WAIT counts the replicas that have
// every write of its own connection), and a take that no replica
// acknowledged in time is given back and answered with errNotReplicated.
func (r *RedisStock) take(ctx context.Context, sku string, qty int64, id, rec string) (res []int64, err error) {
	keys := r.keys(sku)
	cc, cluster := r.rdb.(*redis.ClusterClient)
	if cluster {
		defer func() {
			if err != nil && !errors.Is(err, errNotReplicated) {
				cc.ReloadState(ctx)
			}
		}()
	}
	if r.opts.Wait <= 0 {
		return takeScript.Run(ctx, r.rdb, keys, qty, id, rec).Int64Slice()
	}
	var c redis.Cmdable = r.rdb
	if cluster {
		// A cluster client would send WAIT, which names no key, to any
		// node: both go to the node of the sku's slot.
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		c = node
	}
	var taken, acked *redis.Cmd
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		// EVAL, not EVALSHA: a replica promoted since holds no script.
		taken = takeScript.Eval(ctx, p, keys, qty, id, rec)
		acked = p.Do(ctx, "WAIT", 1, r.opts.Wait.Milliseconds())
		return nil
	})
	if res, err = taken.Int64Slice(); err != nil {
		return nil, err
	}
	if res[0] != takeTaken {
		return res, nil
	}
	n, werr := acked.Int64()
	if werr == nil && n >= 1 {
		return res, nil
	}
	// Only the master has the take: a failover now could forget it. Give
	// the units back (only at the epoch taken: a reload since counts them
	// already) and sell nothing. The give-back is asynchronous too: a
	// replica promoted with the take and without it sells less, never more.
	if gerr := doneScript.Run(context.WithoutCancel(ctx), r.rdb, keys, res[2], 1, id).Err(); gerr != nil {
		r.logger.WarnContext(ctx, "redis-stock: a take no replica acknowledged could not be given back; its units stay taken until a reload",
			slog.String("sku", sku), slog.String("order_id", id), slog.Any("error", gerr))
	}
	if werr != nil {
		return nil, fmt.Errorf("%w, given back: WAIT 1 %s: %w", errNotReplicated, r.opts.Wait, werr)
	}
	return nil, fmt.Errorf("%w, given back (WAIT 1 %s answered %d)", errNotReplicated, r.opts.Wait, n)
}
