// Package redlock is a lock.Backend on several independent Redis servers
// (typically five, no replication between them), with the Redlock algorithm
// of github.com/go-redsync/redsync/v4: a lease is granted when a majority of
// the servers took the key with SET NX PX within its validity (the TTL, less
// the time the grant took and an allowance for clock drift), and refreshed
// and released on every server, counting a majority again.
//
// It is here to show what Redlock does and does not promise, next to
// redislock (one server) and etcdlock (Raft): the tests in this package run
// it on real redis-servers, and one of them reproduces Kleppmann's scenario,
// in which a server's clock jump lets two clients hold the lock at once. See
// docs/redlock.md.
//
// # Keys
//
// On each server, for a lock key k and the default prefix:
//
//	stocklock:redlock:k         "<token>:<owner>", with a PX expiry: the lease
//	stocklock:redlock:k:fence   the last token confirmed on this server, never
//	                            expired
//
// # Tokens
//
// Redlock itself has no fencing token: its random value only tells the
// holder's own lease apart. This backend adds one in two more rounds around
// redsync's. Before the lock round, every server reports the larger of its
// fence and its clock in microseconds (prepare.lua), and the token is one
// more than the largest report from at least a majority. After it, every
// server that still holds the new lease records the token in its fence,
// unless its fence is already at or above it (confirm.lua); the grant
// stands only if a majority confirms it, and is given back otherwise.
//
// Any two majorities share a server. On that server the later grant could
// take the key only after the earlier lease left it, so after the earlier
// grant's confirmation: it found the earlier token in the fence and
// confirmed only a higher one. Hence the guarantee: every token this
// backend returns is strictly greater than every token it returned before
// for the key, and of two leases held at the same time (which Redlock
// allows when a server's clock jumps, a process pauses, or a server
// restarts empty), the later one has the higher token. This part depends on
// no clock and no timing; a fenced write (package inventory) therefore
// rejects the older holder even when the lock itself failed.
//
// What it does depend on is that the shared server still has its fence. A
// server restarted without persistence loses its fences: then the clock term
// keeps tokens increasing, provided that server's clock has not stepped
// back below the tokens granted before. Fence keys are never deleted; keep
// the servers off allkeys-* eviction policies.
//
// # What a lease guarantees
//
// Mutual exclusion holds only under Redlock's timing assumptions: every
// server's clock advances at about the same rate as the holder's (within
// the drift allowance) and does not jump, and the holder does not pause
// past its validity. A server whose clock jumps forward expires the lease
// early, and once a minority of servers also becomes unreachable, another
// client can win a majority while the first still believes it holds the
// lock. Use the token.
//
// # The Backend contract
//
// The same owner's TryAcquire re-grants the key with a higher token: the
// first round deletes that owner's lease on every server it reaches, then
// takes the key as any other grant. Another owner may take the key in
// between; the superseded lease is lost either way. Refresh and Release
// answer lock.ErrNotHeld only when too many servers refuse for a majority
// to be possible; servers that still hold the lease are extended or freed
// all the same. ReleaseOwner (lock.OwnerReleaser) deletes the owner's
// lease, whatever its token, on every server it reaches, and succeeds once
// a majority has answered. Any other failure (too few servers answer)
// leaves the outcome unknown, and the error wraps ErrNoQuorum.
package redlock
