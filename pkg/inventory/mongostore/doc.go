// Package mongostore keeps the inventory (package mongostore's items and
// orders) in MongoDB, one item per document, and implements every strategy
// of the registry (pkg/strategy) as MongoDB writes: one
// [inventory.Strategy] each, from the broken to the lock-free ([Build]).
//
// The sections below give the schema of every collection the package
// writes, how each strategy sells, the two protocols every safe sale rests
// on (fencing, and a unit taken and its order being one fact), and which
// file holds which idea.
//
// # The collections
//
// A [Store] writes six collections of its database, named by exported
// constants:
//
//   - [ItemsCollection] ("items"): one document per sku, and, for a sku the
//     buckets strategy split, one document per bucket.
//   - [OrdersCollection] ("orders"): the ledger, one document per sale.
//   - [IdempotencyCollection] ("idempotency"): one reservation per sku and
//     Idempotency-Key.
//   - [AttemptsCollection] ("idempotency_attempts"): the keyed decrements
//     in flight.
//   - [HeartbeatsCollection] ("heartbeats"): one sign of life per [Store].
//   - [HoldsCollection] ("holds"): the settled holds.
//
// queued adds a seventh, [QueuedOrdersCollection] ("queued_orders"), which
// [NewQueued] creates: by order id, the orders it accepted without
// waiting (DecrementAsync) and the refusals its consumer recorded
// (queued_async.go).
//
// [Store.EnsureCollections] creates them and [Store.EnsureIndexes] indexes
// them: orders by {sku, at}, and idempotency by at, a TTL index of
// [StoreOptions.KeyRetention] where the server has TTL indexes.
//
// # The item document
//
// An item is one document in the items collection (its Go form is the
// store's own itemDoc, document.go; what the package answers is
// [inventory.Item], the fields the API shows):
//
//	{_id: sku, stock: NumberLong, version: NumberLong,
//	 fences: {<strategy>: NumberLong},
//	 pending: {<order id>: order}, aborted: {<order id>: date}, aborted_through: <order id>,
//	 restocks: {<key hash>: {qty, seq}},
//	 held: NumberLong, holds: {<hold id>: hold}, confirm_clock: date,
//	 epoch: NumberLong,
//	 split: {gen, base}, buckets: NumberInt, last_gen: NumberLong}
//
// Its fields, and who writes them:
//
//   - _id: the sku ([inventory.ValidSKU]; it never contains "#" or "/").
//   - stock: the units that can be sold now. Held units and the units of a
//     split's buckets are not in it. Every sale takes from it (a buckets
//     sale from a bucket's stock instead), [Store.Put] and [Store.PutIf]
//     set it, [Store.Restock] adds to it, a hold moves units from it into
//     held and a released or expired hold moves them back.
//   - version: counts every write to stock, by every writer ($inc 1). The
//     optimistic compare-and-set, the lock strategies' fenced write,
//     [Store.PutIf] and a buckets merge are conditional on it. A split
//     item's version as read ([Store.Snapshot]) also counts its buckets'.
//   - fences: per lock strategy (mongo-lease, redis-lock, etcd-lock,
//     redlock), the highest fencing token that has read the item under
//     that lock: set by [Store.FencedRead], required by [Store.FencedWrite]
//     and by a lock strategy's hold. Written only when fencing is on
//     ([Deps.Fencing], [LockedConfig.Fencing]); local and unsafe never
//     write it. queued's consumer of partition n registers its lease's
//     token as queued-p<n> (always fenced). Put and a buckets split create
//     it empty.
//   - pending: by order id, the orders whose stock is taken but that are
//     not in the ledger yet. Every stock write that sells sets
//     pending.<id> in the same update (every strategy, and a hold's
//     confirm); recording the order removes it; [Store.RecoverPending]
//     records what a dead replica left. See the last section.
//   - aborted: by order id, the keyed attempts that [Store.RecoverKeys]
//     gave up before their stock write landed (the attempt's replica died,
//     or it ran past [StoreOptions.AbandonAfter]). Every stock write of
//     that order id is refused. The date is when it was given up, by the
//     recovering replica's clock; only the entry's presence is checked.
//   - aborted_through: an order id; every keyed order id at or below it
//     (order ids are time-ordered tickets) is given up too. RecoverKeys'
//     compaction raises it ($max) as it removes aborted entries, so that
//     aborted stays small. Every keyed stock write requires its id above
//     it.
//   - restocks: the keys of the item's last restockKeys (100)
//     restocks ([Store.Restock]), by a hash of the key (a key may hold "."
//     or "$"), each {qty, seq}: qty the units added (negative: removed),
//     seq the item's version when the restock was decided, which orders
//     them so that the oldest is dropped. A restock whose key is here is
//     not applied again.
//   - held: the units of the item's holds stored as held. stock + held +
//     the units of the sku's orders (ledger or pending) is the same at
//     every read. A hold's create adds its qty; a confirm, a release, an
//     expiry's return subtract it (and the last two add it back to stock).
//   - holds: by hold id, the item's open holds, and the settled ones until
//     they are in the holds collection ([inventory.Hold]): sku, qty,
//     strategy, replica, created and expires (the store's clock), state
//     ([inventory.HoldHeld], [inventory.HoldConfirmed],
//     [inventory.HoldReleased], [inventory.HoldExpired]), key (the
//     create's Idempotency-Key), fence (the creating write's lease token),
//     confirming (the nonce of the confirm whose first write reached it
//     last), confirmed_at, confirm_replica and confirm_key (set by the
//     confirm's second write). Written by [Store.CreateHold],
//     [Store.HoldOnce], [Store.ConfirmHold], [Store.ReleaseHold], by any
//     sale that returns expired holds' units; an entry is unset once the
//     settled hold is recorded in the holds collection (by the call that
//     settled it, or by [Store.RecoverHolds]).
//   - confirm_clock: the store's clock ($currentDate) as the first write
//     of a confirm ([Store.ConfirmHold]) applied; the confirm stands only
//     if it is before the hold's expires. A top-level field because
//     FerretDB v1 sets $currentDate on nothing else; each confirm
//     overwrites it.
//   - epoch: redis-stock only. Every load of the stock into Redis bumps
//     it ($inc) and reads the stock in one update; a batch of sales taken
//     from Redis lands only at the epoch it was taken at.
//     [RedisStock.Recover] looks at the items that have one.
//   - split: buckets only, {gen, base}: the stock is split across the
//     sku's buckets at generation gen, a bucket not yet written counting
//     its share of base. Set (with stock 0) by a spread (a buckets sale of
//     an item with at least 2k units) or [Store.PutSplit] (which may also
//     start a new generation), removed by a merge or a Put. While it is
//     set, Put and PutIf go through the split, and stock holds only what
//     was added beside the buckets (a restock).
//   - buckets: buckets only, the bucket count k, fixed at the item's first
//     split ([DefaultBuckets], at most [MaxBuckets]) and kept after a
//     merge. RecoverKeys' give-up is conditional on it.
//   - last_gen: buckets only, the highest split generation used, so that a
//     new split never meets a bucket of its own generation left from
//     before.
//
// # Bucket documents
//
// The buckets strategy ([Buckets]) keeps k more documents per split sku in
// the items collection:
//
//	{_id: "<sku>#<i>", sku, gen: NumberLong, stock: NumberLong, version: NumberLong,
//	 pending: {<order id>: order}, aborted: {<order id>: date}, aborted_through: <order id>}
//
// Its fields:
//
//   - _id, sku: bucket i of sku.
//   - gen: the split generation the bucket was written at: at the item's
//     split.gen it takes sales; at split.gen+1 it is frozen by a merge or
//     a PUT in progress (it counts, sells nothing); below it, or missing,
//     it counts its share of split.base, which its next write stores (the
//     split writes every bucket at once; one it missed is written before a
//     take from it). RecoverKeys may upsert a bucket with nothing but an
//     aborted entry: its gen is then missing.
//   - stock, version: the bucket's units, and its writes (a bucket starts
//     at version 0 so that the sku's version does not move).
//   - pending, aborted, aborted_through: as in the item, for the sales
//     taken from this bucket. A bucket copies the item's aborted ids and
//     aborted_through when it is written, and RecoverKeys fences a given-up
//     attempt in every bucket before the item.
//
// # The ledger
//
// Every sale inserts one order document in the orders collection
// ([inventory.Order]):
//
//	{_id: order id, sku, qty, replica, strategy, fence, at, remaining, attempts, key}
//
// Its fields:
//
//   - _id: the order id, fixed before the stock write (for a keyed request,
//     the one its reservation chose; for a confirmed hold, the hold's id).
//   - sku, qty: what was sold.
//   - replica, strategy: who sold it, and how.
//   - fence: the lease token the stock write carried; 0 without a lock.
//   - at: the selling replica's clock (UTC, ms) when the order was made,
//     before its stock write; for a hold's confirm, the hold's
//     confirmed_at (the store's clock).
//   - remaining: the stock the sale left, absent when unknown (an atomic
//     sale recorded by another replica than the seller, a sale from one
//     bucket, a hold's confirm).
//   - attempts: the compare-and-set attempts of an optimistic sale.
//   - key: the request's Idempotency-Key, if it had one.
//
// Orders are inserted by whoever records the sale (the seller, or
// recovery); batched and redis-stock insert a batch's orders in one
// InsertMany. The orders are the ledger: the number of acknowledged sales
// of a sku must equal the number of its orders, and the stock must have
// gone down by exactly the quantities they record.
//
// # Idempotency keys and attempts
//
// [Store.DecrementOnce] (and [Store.HoldOnce], for a hold's create)
// reserves a key with one document in the idempotency collection:
//
//	{_id: "<sku>/<key>", sku, key, request, order_id, at, freed}
//
// Its fields:
//
//   - _id, sku, key: the sku and the Idempotency-Key.
//   - request: a fingerprint (SHA-256) of sku, qty and the match
//     condition: the same key with another request is refused.
//   - order_id: the order id the decrement will use, fixed before it runs,
//     so its outcome is found in the ledger or pending in the item.
//   - at: an upper estimate of the store's clock at the reservation; the
//     TTL index and RecoverKeys expire the key by it after the retention
//     ([DefaultKeyRetention]).
//   - freed: set to order_id when the attempt sold nothing, so that the key
//     may be taken again by the same request.
//
// and, before that reservation, one document in the attempts collection,
// deleted once the attempt is settled (sold and recorded, or its key
// freed):
//
//	{_id: <order id>, key_id: "<sku>/<key>", at, instance}
//
// key_id names the reservation, at is as there, and instance is the [Store]
// that runs the attempt (its heartbeat's _id). RecoverKeys reads this
// collection whole to find the attempts of dead or stalled replicas and
// gives them up (aborted in the item and its buckets).
//
// # Heartbeats
//
// [Store.Heartbeat] keeps one document per Store in the heartbeats
// collection:
//
//	{_id: <instance>, replica, beat, dead_after_ms, at, stopped}
//
// instance is random per Store; replica is [StoreOptions.Replica]; beat
// counts the Heartbeat calls ($inc), and another store takes this one for
// dead when beat stands still for DeadAfter by its own monotonic clock;
// dead_after_ms is the writer's [StoreOptions.DeadAfter], which
// [Store.CheckPeers] requires equal on every store; at is the store's
// clock at the write ($currentDate), for people only; stopped is set by
// [Store.Leave]. A dead instance's heartbeat is deleted once it has no
// attempt left.
//
// # Holds
//
// A settled hold (confirmed, released or expired) is recorded in the holds
// collection before its entry leaves the item, so a hold is found in one
// place or the other:
//
//	{_id: hold id, sku, qty, strategy, replica, created, expires, state,
//	 confirmed_at, confirming, key, fence, confirm_replica, confirm_key}
//
// The fields are the item's holds.<id> entry as it was settled (see the
// item's holds above). See docs/holds.md.
//
// # Outside MongoDB
//
// redis-stock keeps, per sku, a hash {epoch, stock, inflight} at
// [RedisStockKey] (the copy of the stock for one epoch, and the units taken
// but not yet written to the item), a hash of the sales taken from it at
// that key + ":sales" (by order id: replica, key, epoch, qty, at), and a
// claim at that key + ":loading" that spares concurrent loads;
// see docs/redis-stock.md. The sold-out shortcut (soldout.go) keeps
// its "probably sold out" marks in the replica's memory and writes nothing.
// queued keeps each sale in a NATS JetStream stream, SALES_<prefix>
// ([QueuedPrefix]; subjects <prefix>.sales.<partition>, message id = order
// id and the call's nonce, file storage, work-queue retention) from its
// publish until its consumer acknowledges it; the partitions' leases are
// MongoDB leases (pkg/lock/mongolock). The lock strategies' leases are
// kept by their lock packages (pkg/lock/...), not by this one.
//
// # The strategies
//
// Every strategy of the registry (pkg/strategy), in its order. Each
// records its order as pending in the write that takes the stock, and every
// such write carries the not-given-up condition on its order id (but for
// redis-stock's demo knob [RedisStockOptions.AckAfterRedis], which writes
// behind unconditionally). docs/hot-sku.md
// compares the ways past one document on a hot sku.
//
//   - unsafe ([Unsafe], unsafe.go; docs/lost-update.md): read, check,
//     write back stock-qty with no condition but the order's. Two concurrent
//     requests read the same stock and both write stock-1: one sale is lost
//     from the count, and the last unit is sold twice.
//   - local ([Locked] under pkg/lock/locallock, locked.go;
//     docs/lost-update.md "Why a mutex does not fix it"): the same
//     read-modify-write under an in-process lock, never fenced (its tokens
//     count from 1 in every process). Correct with one replica; with two,
//     the race of unsafe comes back.
//   - mongo-lease, redis-lock, etcd-lock ([Locked], locked.go and
//     locked_holds.go, fence.go; docs/mongo-lease.md, docs/redis-lock.md,
//     docs/etcd-lock.md, docs/fencing.md): the read-modify-write under a
//     distributed lock (pkg/lock/mongolock, pkg/lock/redislock,
//     pkg/lock/etcdlock), in four steps: lock, fenced read, fenced write
//     (conditional on fences.<strategy> and version), release. etcd
//     replicates its grants by Raft; that makes the grants survive a
//     failover, not a paused holder, so etcd-lock is fenced too. Each takes
//     part in holds.
//   - redlock ([Locked] under pkg/lock/redlock, locked.go;
//     docs/redlock.md "The `redlock` strategy"): the same four steps under a
//     lease granted by a majority of independent redis-servers, fenced by
//     its token like the others. Takes part in holds.
//   - optimistic ([Optimistic], optimistic.go; docs/optimistic-vs-atomic.md):
//     no lock; read stock and version, then write only if the version is
//     unchanged (compare-and-set), retrying (by default up to
//     [DefaultCASAttempts] times) with jittered backoff; a decrement that
//     loses every attempt answers [inventory.ErrConflict].
//   - atomic ([Atomic], atomic.go; docs/optimistic-vs-atomic.md): no lock
//     and no read: one conditional update {_id: sku, stock: {$gte: qty}}
//     with $inc {stock: -qty, version: 1}. The server checks and decrements
//     in one step, so it cannot oversell. Takes part in holds.
//   - batched ([Batched], batched.go; docs/batched.md): atomic's update for
//     many sales of one sku at once: while one write of the sku is in
//     flight the next sales queue, then go out (up to [DefaultMaxBatch]) as
//     one update {stock: {$gte: total}} that sets each member's pending
//     entry; their orders go into the ledger in one insert.
//   - buckets ([Buckets], buckets.go; docs/buckets.md): the sku's stock is
//     split across k bucket documents; a sale takes from one bucket, chosen
//     at random, with atomic's update on that bucket. When no bucket covers
//     qty, a merge freezes every bucket, reads the exact total and, in one
//     write of the item, unsplits it and sells from the total or answers
//     sold out; it never answers sold out while the buckets together hold
//     qty. A stock below 2k units is sold from the item, unsplit.
//   - redis-stock ([RedisStock], redisstock.go, redisstock_take.go and the
//     *.lua scripts; docs/redis-stock.md): a copy of the stock lives in
//     Redis for one epoch; a Lua script admits each sale there, and a
//     replica's sales of one epoch are written to the item in one update
//     conditional on the epoch and on stock >= their sum, then recorded
//     and, by default, only then acknowledged.
//   - queued ([Queued], queued.go, queued_observe.go; docs/queued.md): a
//     sale is published to a durable log (NATS JetStream), partitioned by
//     sku; the one consumer of a partition, the holder of its lease,
//     fetches a batch and writes each sku's sales in log order as one
//     update fenced by its token (fences.queued-p<n>), records them (a
//     refusal in queued_orders), answers the buyers and acknowledges; a
//     sale delivered again that is already pending, in the ledger or
//     refused is answered, not applied. A buyer may wait for the answer
//     or, [Queued.DecrementAsync], poll it ([Store.OrderState]).
//
// [Build] makes each of them as a replica sells through it ([Built]), with
// what every strategy needs added in one place, each layer stating what a
// strategy without it would do: the request checked first; the sold-out
// shortcut (soldout.go: after a sold out, a sku's sales read what is
// sellable first, one coalesced read for many sales, and go on to the
// strategy only if it shows enough); the units of expired holds returned
// for a strategy that takes no part in holds; and a split sku sold from its
// buckets for a strategy that sells from the item alone.
//
// # One sale write
//
// Every write that takes stock is a sale value built in sale.go: the
// strategy says what it decided (its orders or hold, the units or an
// absolute stock, and its own conditions as values: the version it read,
// its fencing token, redis-stock's epoch, the split's generation), and
// sale.go adds what every such write carries (the orders not given up,
// their pending entries, the stock condition, the version, the expired
// holds a short stock needs) and explains a write that matched nothing
// once: gone, given up, fenced, stale, sold out (split or not), or changed
// since.
//
// # Fencing
//
// A lock lease can end without its holder noticing in time: a holder paused
// by the garbage collector or SIGSTOP past its TTL resumes believing it still
// holds the lock while another replica already does. The lock alone then
// lets both write. Each lease carries a fencing token that strictly increases
// per key, and the item document remembers the highest token that touched
// it, so the older holder's write is rejected ([inventory.ErrFenced]). See
// [Store.FencedRead] for why the token is registered at the read, not only
// checked at the write.
//
// Every stock write of a safe strategy is conditional on the state its
// decision rests on, in the same update: the version it read (optimistic,
// and the lock strategies' fenced write), or stock >= qty (atomic,
// batched, buckets, and redis-stock, which also requires its epoch). A
// write computed from a stale read fails cleanly ([inventory.ErrStale])
// instead of setting an absolute stock over another writer's sale. An
// absolute set ([Store.Put]) is not idempotent under concurrent sales: a
// second set erases the sales made since the first; a keyed relative
// change ([Store.Restock]) applies once.
//
// # A unit taken and its order are one fact
//
// The store has single-document atomicity only, and the stock and the
// ledger are different documents. So the write that takes the stock also
// records the sale's order in the item, under pending, in the same
// single-document update; the order is then inserted into the ledger and
// the pending entry removed. A replica that dies between the two leaves the
// order pending, and [Store.RecoverPending], which every replica runs at
// start-up and periodically, records it: the order's id is fixed before
// the stock write, so recording is idempotent, whoever does it. If the
// ledger insert fails, the sale still stands, is reported in
// [inventory.Sale.LedgerErr], and stays pending until recovery records it.
//
// A keyed attempt given up by [Store.RecoverKeys] is fenced out of the item
// (aborted, aborted_through) in one update, and every stock write of its
// order requires that fence absent: the give-up and a late write are
// decided by one document, whatever the clocks say.
//
// # Files
//
//   - store.go: [Store], [StoreOptions], the collection names, Put and
//     PutIf, the indexes.
//   - sale.go: the one sale write: the sale value, its conditions, the
//     write and the explanation of a miss.
//   - registry.go: [Build], [Built] and [Deps], from a pkg/strategy entry
//     to a strategy as a replica sells through it.
//   - checked.go: the check in front of every strategy, and the unwrapping
//     of Build's layers.
//   - unsafe.go, atomic.go, optimistic.go: those strategies, one each.
//   - locked.go, locked_holds.go, queue.go: the lock strategies (local,
//     mongo-lease, redis-lock, etcd-lock, redlock), their holds, and the
//     per-sku queue in front of the lock service.
//   - fence.go: [Store.FencedRead] and [Store.FencedWrite].
//   - batched.go: batched, and the ledger's batch insert.
//   - buckets.go: the buckets strategy ([Buckets]) and its sale path
//     (Buckets.Decrement, round, take, takeItem), and its cache of splits.
//   - split.go: the mechanics of a split sku: the bucket documents, the
//     view of an item and its buckets (read, the total, [Store.Snapshot]),
//     spread, merge, freeze and unsplit across generations, PUT of a split
//     item ([Store.PutSplit]), fencing of given-up attempts in buckets.
//   - splitaware.go: the layer that lets the other strategies sell a
//     split sku through the buckets strategy, and their item sold out.
//   - redisstock.go, redisstock_take.go, redisstock_observe.go,
//     redisstock_*.lua: redis-stock: loading, the take, the batch write,
//     [RedisStock.Recover].
//   - queued.go, queued_observe.go, queued_async.go: queued: the publish,
//     the partitions' consumers and their fenced batch writes; the log's
//     depth and the waiting buyers ([Queued.State]); the answer that does
//     not wait, the refusals recorded and the poll.
//   - soldout.go: the sold-out shortcut.
//   - holds.go: holds: create, read, release, the return of expired holds
//     to a strategy that is not a Holder (returning), [Store.RecoverHolds],
//     the holds collection.
//   - confirm.go: a confirm in two writes ([Store.ConfirmHold]).
//   - order.go: new orders and their pending entries, the ledger
//     ([Store.Orders]), recording a sale, [Store.RecoverPending].
//   - document.go: the item document (itemDoc), and its conversion to
//     [inventory.Item].
//   - attempts.go: the not-given-up condition (notAborted), order id tickets,
//     the compaction of aborted into aborted_through.
//   - idempotency.go: [Store.DecrementOnce], key reservations and attempts,
//     [Store.RecoverKeys].
//   - liveness.go: heartbeats, [Store.Heartbeat], [Store.CheckPeers],
//     [Store.Leave].
//   - restock.go: [Store.Restock].
//   - clock.go: estimates of the store's clock, for key expiry, give-ups
//     and holds.
//   - errors.go, strategy.go, steps.go, via.go, writeconcern.go: error
//     classification, shared helpers, step timing, [Store.Via],
//     [ParseWriteConcern].
package mongostore
