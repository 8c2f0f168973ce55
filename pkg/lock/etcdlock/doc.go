// Package etcdlock is a lock on etcd, a store replicated by Raft: a grant is
// committed by a quorum before it is acknowledged, so a lock survives the
// loss of any minority of the cluster's members, which a Redis primary or a
// single MongoDB server does not.
//
// It offers two locks on one client:
//
//   - [Backend], a lock.Backend (with lock.Notifier and lock.TTLFloor) for
//     lock.Locker: per-acquisition TTLs, same-owner re-grants, and the
//     Locker's renewal watchdog and Done channel. Waiters are woken by an
//     etcd watch on the key's deletion, not by polling. It is not fair:
//     after a release, the waiters race and any one of them may win.
//   - [FIFO], a queue lock in the style of etcd's concurrency.Mutex: every
//     waiter puts a key under the lock's prefix and is granted the lock when
//     every key created before its own is gone, so waiters are served
//     strictly in arrival order. It hands over several times faster than
//     concurrency.Mutex (see below).
//
// # Leases and TTLs
//
// etcd leases have whole-second TTLs. Both locks reject a TTL under one
// second or with a fraction of a second with an error wrapping
// lock.ErrInvalidArgument; Backend.MinTTL reports the 1 s floor to the
// Locker. A server may keep a lease longer than asked: its shortest lease is
// 1.5 election timeouts rounded up to whole seconds (2 s at etcd's default
// 1 s election timeout, 1 s for devstore's embedded server). A longer lease
// on the server than in the holder's mind is safe (the holder stops first);
// waiters just wait a little longer for an abandoned lock (etcd also looks
// for expired leases only every 500 ms). A holder counts its expiry from
// before the request that granted or renewed it, so it always believes its
// lease ends no later than the server does.
//
// # Fencing tokens
//
// A token is an etcd revision, which the whole cluster shares and which only
// grows, across compactions, leader changes and restarts:
//
//   - Backend: the revision of the Put that granted the lease. For a fresh
//     grant that is the lock key's create revision. A same-owner re-grant
//     puts the key again (etcd refuses a delete and a put of one key in one
//     transaction, so the key cannot be re-created atomically), and its
//     token is that Put's revision, the key's new mod revision.
//   - FIFO: the create revision of the waiter's own key, that is its place
//     in the queue. Grants happen in that order, so tokens increase.
//
// Tokens are per lock kind: a Backend lock and a FIFO lock on the same name
// are two different locks, with keys under different prefixes.
//
// # What etcd does not give you either
//
// etcd's own documentation says its lock is not, alone, a mutual exclusion
// mechanism: a holder that is paused (garbage collection, SIGSTOP, a slow
// disk) can resume after its lease expired and another owner was granted the
// lock, still believing it holds it. Consensus makes the grants themselves
// safe; it cannot stop a stale holder from acting. Pass the token to every
// write the lock protects and let the resource reject stale ones.
//
// # Why the stock concurrency.Mutex is slow under contention
//
// concurrency.Mutex waits for its predecessor's deletion with a watch from
// an explicit revision (that of its read of the queue). The server counts
// such a watcher as unsynced, and catches unsynced watchers up only every
// 100 ms (watchResyncPeriod, not configurable), so a deletion that lands
// before the next catch-up reaches the waiter up to 100 ms late. Under
// contention nearly every wait is like that: 8 contenders on one key get
// about 60-80 acquisitions a second, with a median wait of 100 ms, however
// fast the disk. FIFO keeps one watch per key and process, made without a
// start revision (a synced watcher: each deletion is sent as soon as it is
// applied) and kept while waiters come and go; a waiter reads the queue once
// as it joins, and again only if the watch had to be made again. See
// docs/benchmarks.md for the numbers.
package etcdlock
