package mongostore

// RedisStockObserver is told what redis-stock does with the copies of stock
// it holds in Redis, for metrics (the service turns it into
// stock_redis_stock_reloads_total). Its methods must be cheap and safe for
// concurrent use.
type RedisStockObserver interface {
	// RedisStockReloaded reports one load of sku's stock into Redis for a
	// new epoch (one bump of the item's epoch), and why: one of
	// RedisStockReloadReasons.
	RedisStockReloaded(sku, reason string)
}

// Why redis-stock loaded a sku's stock into Redis: the reasons of
// RedisStockObserver.RedisStockReloaded.
const (
	// reloadFirst: the sku's first sale; it had never been loaded.
	reloadFirst = "first_load"
	// reloadRedisLost: Redis had no copy of a sku loaded before: it
	// restarted without persistence, failed over to a replica without it,
	// or the keys were deleted.
	reloadRedisLost = "redis_lost"
	// reloadRefused: the item refused a batch of sales taken in Redis (its
	// epoch had moved, or it held less stock than Redis had admitted: a
	// PUT down, another strategy on the sku, a failover that lost takes).
	reloadRefused = "refused"
	// reloadItemAhead: Redis answered sold out while the item, less the
	// units in flight, still covered the sale (a PUT up, a restock).
	reloadItemAhead = "item_ahead"
	// reloadDeadTake: a sale taken in Redis had waited longer than the
	// grace for its batch write, by the Redis server's clock: its replica
	// died or stalled. The reload refuses that write should it come, and
	// puts the units back: the reconciliation of a dead replica's take.
	reloadDeadTake = "dead_take"
)

// RedisStockReloadReasons lists every reason of a reload, for metrics that
// show each at zero from the start.
var RedisStockReloadReasons = []string{reloadFirst, reloadRedisLost, reloadRefused, reloadItemAhead, reloadDeadTake}

type nopRedisStockObserver struct{}

func (nopRedisStockObserver) RedisStockReloaded(string, string) {}
