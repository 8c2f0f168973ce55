// Package etcdlock is a lock.Backend on etcd, a store replicated by Raft: a
// grant is committed by a quorum before it is acknowledged, so a lock
// survives the loss of any minority of the cluster's members, which a Redis
// primary or a single MongoDB server does not.
//
// [Backend] is a lock.Backend (with lock.Notifier and lock.TTLFloor) for
// lock.Locker: per-acquisition TTLs, same-owner re-grants, and the Locker's
// renewal watchdog and Done channel, the one lease keep-alive of this
// project. Waiters are woken by an etcd watch on the key's deletion, not by
// polling. It is not fair: after a release, the waiters race and any one of
// them may win.
//
// # Leases and TTLs
//
// etcd leases have whole-second TTLs. The backend rejects a TTL under one
// second or with a fraction of a second with an error wrapping
// lock.ErrBadTTL; Backend.MinTTL reports the 1 s floor to the Locker. A
// server may keep a lease longer than asked: its shortest lease is 1.5
// election timeouts rounded up to whole seconds (2 s at etcd's default 1 s
// election timeout, 1 s for devstore's embedded server). A longer lease on
// the server than in the holder's mind is safe (the holder stops first);
// waiters just wait a little longer for an abandoned lock (etcd also looks
// for expired leases only every 500 ms). A holder counts its expiry from
// before the request that granted or renewed it, so it always believes its
// lease ends no later than the server does.
//
// # Fencing tokens
//
// A token is an etcd revision, which the whole cluster shares and which only
// grows, across compactions, leader changes and restarts: the revision of
// the Put that granted the lease. For a fresh grant that is the lock key's
// create revision. A same-owner re-grant puts the key again (etcd refuses a
// delete and a put of one key in one transaction, so the key cannot be
// re-created atomically), and its token is that Put's revision, the key's
// new mod revision.
//
// # What etcd does not give you either
//
// etcd's own documentation says its lock is not, alone, a mutual exclusion
// mechanism: a holder that is paused (garbage collection, SIGSTOP, a slow
// disk) can resume after its lease expired and another owner was granted the
// lock, still believing it holds it. Consensus makes the grants themselves
// safe; it cannot stop a stale holder from acting. Pass the token to every
// write the lock protects and let the resource reject stale ones.
package etcdlock
