// Package mongolock is a lock.Backend on a MongoDB collection: a lease
// granted by one findOneAndUpdate, with a fencing token in the same
// document.
//
// # The lock document
//
// Each key is one document, keyed by _id:
//
//	{_id: key, owner: "replica-a-1234-9f...", token: NumberLong(7), expiresAt: ISODate(...)}
//
// token is the fencing token: every grant increments it, so it strictly
// increases across releases, expiries, takeovers and server restarts. That
// only holds while the document exists, so the document is NEVER deleted:
// Release marks it free (owner "" and expiresAt in the past) instead, and no
// TTL index may be created on the lock collection. Deleting a lock document,
// by hand or by a TTL index, restarts its tokens at 1, and a resource that
// remembers token 7 would then reject every new holder (or, worse, a store
// that forgot 7 too would accept a paused old holder's write). The cost is
// one small document per key ever locked; use a bounded key space.
//
// # Acquire: one findOneAndUpdate
//
// The grant is a single findOneAndUpdate with upsert and ReturnDocument
// After:
//
//	filter: {_id: key, $or: [{owner: ""}, {expiresAt: {$lt: now - skew}}, {owner: me}]}
//	update: {$set: {owner: me, expiresAt: now + ttl}, $inc: {token: 1}}
//
// The filter names the three states in which the key may be granted: free
// (released), expired, or already ours (a restarted process that kept its
// identity gets its key back at once, with a new token). If the document
// matches, the update grants it; if no document has that _id, the upsert
// creates it with token 1. If the document exists but is held by someone
// else, the filter does not match, the upsert tries to insert a second
// document with the same _id, and the server answers with a duplicate-key
// error (code 11000). That error is the normal answer "held by another
// owner": TryAcquire returns lock.ErrNotAcquired for it, not a failure, so
// that a contended attempt does not look like an outage. The call either
// grants the key or fails; the check of the returned holder only refuses a
// server that broke that rule.
//
// FerretDB v1 (the embedded development store) answers exactly as MongoDB
// does: its findAndModify inserts on no match, SQLite rejects the duplicate
// _id, and the reply is a command error with code 11000 and code name
// DuplicateKey ("E11000 duplicate key error collection: db.locks"), which
// mongo.IsDuplicateKeyError recognises. FerretDB v1 is only atomic behind
// the write gate of internal/mongogate, which devstore puts in front of it.
//
// Two things keep waiting cheap, so that waiters cannot starve the holder's
// renewals (which are writes, and on the embedded store queue behind every
// other write). Before the grant, TryAcquire reads the document and answers
// lock.ErrNotAcquired without writing when it is visibly held; the read
// decides nothing, the findOneAndUpdate still does. And within one Backend,
// attempts on the same key take turns: however many goroutines of a process
// wait for a key, one attempt at a time reaches the server, and a waiter
// that sees a sibling of another owner win while it queued answers
// lock.ErrNotAcquired at once. Refresh and Release never queue.
//
// # Expiry, clocks and the skew allowance
//
// The server does not decide expiry: expiresAt is written from the holder's
// clock and compared against the contender's clock (the embedded store has
// no $$NOW or $expr, and a lease judged by the client is the same on every
// server). A contender therefore treats a lease as expired only when its
// expiresAt is more than the skew allowance (WithSkew) in the past by its
// own clock. As long as the clocks of all processes sharing a collection
// are within the skew of each other, a lease is never taken over before
// its holder, by its own clock, stops believing in it (lock.Lease.Expiry
// counts from before the request, so the holder always gives up first).
//
// If a contender's clock runs ahead of the holder's by more than the skew,
// it takes the key over while the holder still believes it holds it, and
// both run their critical sections at once. A single MongoDB server does
// not help here: the clocks are the clients'. Even then the data is protected by fencing: the takeover got a
// higher token, the protected resource has seen (or will see) that token,
// and rejects the older holder's writes. The skew allowance keeps the lock
// an efficient lock; the fencing token keeps it correct. Released keys
// (owner "") are free at once, whatever the clocks say: the skew only
// delays takeovers of leases their holders did not release.
//
// # Refresh and release
//
// Both are conditional updates on {_id: key, owner: me, token: myToken}; no
// match means the lease is not the current one and they return
// lock.ErrNotHeld without changing anything. A takeover always increments
// the token, so a match proves that nobody else has been granted the key
// since: refreshing a lease that has expired but not been taken over
// revives it, which is safe for exactly that reason (there was no other
// holder in between, and the fencing token is unchanged). Refresh never
// moves expiresAt earlier ($max), because the holder keeps relying on the
// latest expiry it was granted. Release sets owner to "" and expiresAt to
// the Unix epoch, keeping token. ReleaseOwner (lock.OwnerReleaser, the
// Locker's clean-up after a lost reply, which never learned the token) does
// the same on {_id: key, owner: me}, whatever the token.
//
// # Durability
//
// Every write uses write concern majority with journal by default
// (WithWriteConcern): on a replica set, a lease acknowledged by the
// primary alone can be rolled back when that primary fails over, and the
// key is then granted again, to someone else, with the same token.
package mongolock
