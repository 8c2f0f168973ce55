// Package lock is a distributed lock with fencing tokens, built as two layers.
//
// A [Backend] is one lock service's single-attempt primitives: take a key for
// an owner, extend it, give it back. Each call is one atomic operation on the
// server and nothing else: no retries, no goroutines, no clocks beyond the TTL
// it is given. The backends live in sub-packages:
//
//   - mongolock: a MongoDB findOneAndUpdate lease, the token an $inc in the
//     lock document;
//   - redislock: SET NX PX in Lua scripts on one Redis or a Redis Cluster,
//     with a queue of waiters to which a release hands the key;
//   - etcdlock: a key on an etcd lease, replicated by Raft, the token the
//     revision of the grant;
//   - redlock: Redlock (redsync) on several independent Redis servers, a
//     grant on a majority, with a fencing token confirmed on a majority;
//   - locallock: one process only, to show why that is not enough.
//
// locktest is the conformance suite every backend passes.
//
// A [Locker] turns a Backend into a lock a program can use: a blocking
// [Locker.Acquire] that retries with capped, fully jittered exponential backoff
// (and wakes early when the backend can say a key was released, see
// [Notifier]; over a [Handoff] backend it waits in the server's queue instead,
// and the release hands it the key), a single [Locker.TryAcquire], and a
// [Lease] that owns its own renewal (a watchdog timer) and says through
// [Lease.Done] and [Lease.Ctx] when it has been lost. An attempt whose reply
// was lost may have been granted; when the caller gives up, the Locker frees
// that grant in the background, by owner, without taking the key (see
// [OwnerReleaser]).
//
// # What a lease guarantees, and what it does not
//
// While a Lease's Done channel is open, no other owner has been granted the
// key by the server, provided the clocks of the processes involved do not
// drift apart by more than the backend's skew allowance. A lease can still be
// lost without the holder noticing in time: a process paused by the garbage
// collector, SIGSTOP or a slow disk can resume after its TTL, believing it
// still holds the lock. That is why every lease carries a fencing token, a
// number that strictly increases per key with every grant. A resource that
// rejects writes carrying a token lower than one it has already seen turns
// "at most one holder, most of the time" into "at most one writer, always".
// The stock service's fenced write (package inventory) is the worked example.
//
// # Errors
//
// Every error wraps one of the package's variables (ErrNotAcquired,
// ErrNotHeld, ErrLeaseLost, ErrReleased, ErrInvalidArgument and the
// ErrBad* errors that wrap it); test for them with errors.Is. Arguments are
// checked one way, by [CheckArgs], in the Locker and in every backend,
// before any I/O. Each layer adds its piece of context once: a backend's
// error names the backend, the operation, the key and the token, and the
// Locker and the Lease pass it on adding only what they know (how many
// attempts, that the lease is lost), for example
//
//	lock: lease lost: redislock: refresh "item/sku-1" token 7: lock: lease not held
package lock
