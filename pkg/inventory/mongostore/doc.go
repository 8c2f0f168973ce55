// Package mongostore keeps the inventory (package mongostore's items and
// orders) in MongoDB, one item per document, and implements every strategy
// of the registry (pkg/strategy) as MongoDB writes: one
// [inventory.Strategy] each, from the broken to the lock-free ([Build]).
//
// # The documents
//
// An item is one document in the items collection:
//
//	{_id: sku, stock: NumberLong, version: NumberLong, fences: {<strategy>: NumberLong},
//	 pending: {<order id>: order}, aborted: {<order id>: date}, aborted_through: <order id>,
//	 restocks: {<key hash>: {qty, seq}}}
//
// version counts every write to stock, by every writer. Every stock write
// of a safe strategy is conditional on the version it read (the optimistic
// compare-and-set, and the lock strategies' fenced write too), so that a
// write computed from a stale read fails cleanly ([inventory.ErrStale]) instead of
// setting an absolute stock over another writer's sale. fences holds, per
// lock strategy, the highest fencing token that has read the item under
// that lock (see [Store] and the fenced read below). aborted and
// aborted_through fence out the keyed attempts given up (see
// [Store.RecoverKeys]).
//
// Every sale inserts one order document in the orders collection:
//
//	{_id: order id, sku, qty, replica, strategy, fence, at, remaining, attempts, key}
//
// The orders are the ledger: the number of acknowledged sales of a sku must
// equal the number of its orders, and the stock must have gone down by
// exactly the quantities they record.
//
// The idempotency collection holds one reservation per sku and
// Idempotency-Key ([Store.DecrementOnce]).
//
// restocks remembers the keys of the item's last [inventory.RestockKeys]
// relative stock changes ([Store.Restock]), recorded by the update that
// changes the stock, so that a restock sent again applies once. An
// absolute set ([Store.Put]) is not idempotent under concurrent sales: a
// second set erases the sales made since the first.
//
// # The strategies
//
//   - unsafe: read, compute, write back. Two concurrent requests read the same
//     stock and both write stock-1: one sale is lost from the count, and the
//     last unit is sold twice.
//   - local: the same read-modify-write under an in-process lock
//     (pkg/lock/locallock). Correct with one replica; with two, each replica
//     has its own lock table and the race of unsafe comes back.
//   - mongo-lease, redis-lock, etcd-lock: the same read-modify-write under a
//     distributed lock (pkg/lock/mongolock, pkg/lock/redislock,
//     pkg/lock/etcdlock), in four steps (lock, read, modify and write,
//     release), with the read and the write fenced by the lease's
//     token. etcd replicates its grants by Raft; that makes the grants
//     survive a failover, not a paused holder, so etcd-lock is fenced too.
//   - optimistic: no lock; read the stock and its version, then write only if
//     the version is unchanged (compare-and-set), retrying a bounded number of
//     times with jittered backoff.
//   - atomic: no lock and no read: one conditional update
//     {_id: sku, stock: {$gte: qty}} with $inc {stock: -qty}. The server
//     checks and decrements in one step, so it cannot oversell.
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
package mongostore
