package lock

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Backend is the contract every lock service implements: one atomic server
// operation per call, so that a Locker can add retries, renewal and loss
// detection once, for all of them.
//
// Implementations must return ErrNotAcquired (wrapped) when the key is held by
// another owner and ErrNotHeld (wrapped) when a refresh or release names a
// lease that is not the current one; any other error means the outcome is
// unknown, and the Locker treats it as such.
type Backend interface {
	// TryAcquire grants key to owner for ttl when the key is free, expired, or
	// already held by the same owner (a process that restarts with the same
	// identity gets its key back without waiting out the TTL). The returned
	// fencing token is strictly greater than every token granted before for
	// this key, across releases, expiries, takeovers and server restarts.
	TryAcquire(ctx context.Context, key, owner string, ttl time.Duration) (token uint64, err error)

	// Refresh extends the lease (key, owner, token) to ttl from now.
	Refresh(ctx context.Context, key, owner string, token uint64, ttl time.Duration) error

	// Release frees the lease (key, owner, token). Releasing a lease that
	// another owner has since taken over changes nothing and returns ErrNotHeld.
	Release(ctx context.Context, key, owner string, token uint64) error
}

// Notifier is implemented by backends that can tell waiters that a key was
// released, so that a blocked Acquire retries at once instead of sleeping out
// its backoff. Notifications are hints: one may be lost or spurious, and the
// Locker still retries on its backoff schedule.
type Notifier interface {
	// Watch returns a channel that receives a value (best effort) after key
	// is released, and a function that stops the watch. It must not block
	// for long: a Locker calls it before its first attempt so that a release
	// between a failed attempt and the wait is not missed.
	Watch(ctx context.Context, key string) (released <-chan struct{}, stop func())
}

// Handoff is implemented by backends that keep the waiters of a key in a
// queue on the server and, when the key is released, grant it in the same
// operation to the first waiter still in the queue and tell that waiter
// alone. A blocking Locker.Acquire over such a backend waits in the queue
// instead of retrying against the holder, and does not use Notifier.
type Handoff interface {
	// Waiter returns one blocking acquisition's place in key's queue, for
	// owner. It does no I/O; the first Attempt that is refused joins the
	// queue.
	Waiter(key, owner string) Waiter
}

// Waiter is one blocking acquisition's place in a Handoff backend's queue.
// Attempt, Leave and Close are called from one goroutine.
type Waiter interface {
	// Attempt takes the key as Backend.TryAcquire does when it is free, or
	// returns the token of a grant already handed to this waiter. Otherwise
	// it queues the waiter (behind every waiter already queued) or keeps its
	// place, returns an error wrapping ErrNotAcquired, and reports in
	// latest the highest token granted on the key so far. The place is kept
	// for stay from the attempt; a waiter that has not attempted again by
	// then is passed over by handoffs, so that one that died cannot be
	// handed the key.
	Attempt(ctx context.Context, ttl, stay time.Duration) (token, latest uint64, err error)

	// Granted receives the token of a grant handed to this waiter, best
	// effort: when a message is lost, the next Attempt returns the grant. A
	// token that is not above the latest reported by a refused Attempt was
	// granted before that attempt ran, and has ended since (else the attempt
	// would have returned it): ignore it. Any greater token was granted
	// after that attempt was sent. A 0 means that a grant may have been
	// missed: attempt now.
	Granted() <-chan uint64

	// Leave takes the waiter out of the queue and releases a grant handed to
	// it that its owner has not taken, then frees what Close frees. Call it
	// when giving up.
	Leave(ctx context.Context) error

	// Close frees the waiter's local resources, without I/O. Call it once
	// the key is held.
	Close()
}

// OwnerReleaser is implemented by backends that can free the lease an owner
// holds on a key without knowing its token and without taking the key. A
// Locker uses it to clean up after an attempt whose reply was lost (see
// Locker.Acquire): the grant it may have left behind has a token the Locker
// never saw, and taking the key again to learn it would, if the key had
// meanwhile been released, hold a free key and refuse others for a moment.
type OwnerReleaser interface {
	// ReleaseOwner frees key if owner holds it, whatever the token, in one
	// atomic operation, as Release would free that lease: handing the key
	// to the next queued waiter on a Handoff backend, and waking watchers.
	// When key is free or held by another owner it changes nothing and
	// returns nil. It never grants the key to owner.
	ReleaseOwner(ctx context.Context, key, owner string) error
}

// TTLFloor is implemented by backends whose server cannot keep leases
// shorter than some minimum (etcd's lease TTL is whole seconds, for example).
type TTLFloor interface {
	MinTTL() time.Duration
}

// NoTTL is the ttl to pass to CheckArgs for a call that takes none
// (Release, ReleaseOwner).
const NoTTL time.Duration = math.MinInt64

// CheckArgs is the one argument check of package lock and of every
// Backend, made before any I/O: a backend used without a Locker rejects
// the same input a Locker does, with the same errors. key must be 1 to
// MaxKeyLen bytes (ErrBadKey), owner 1 to MaxKeyLen bytes (ErrBadOwner),
// and ttl positive (ErrBadTTL) unless it is NoTTL. A backend whose server
// has further limits (etcd's whole seconds) checks them after this, with
// errors that wrap ErrBadTTL. Backends wrap the error with their name, the
// operation and the key, as they do every error.
func CheckArgs(key, owner string, ttl time.Duration) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	if ttl != NoTTL {
		return checkTTL(ttl, 0)
	}
	return nil
}

func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w (got %d)", ErrBadKey, len(key))
	}
	return nil
}

func checkOwner(owner string) error {
	if owner == "" || len(owner) > MaxKeyLen {
		return fmt.Errorf("%w (got %d)", ErrBadOwner, len(owner))
	}
	return nil
}

// checkTTL refuses a TTL that is not positive or is under floor.
func checkTTL(ttl, floor time.Duration) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("%w: %v is not positive", ErrBadTTL, ttl)
	case ttl < floor:
		return fmt.Errorf("%w: %v is under the floor of %v", ErrBadTTL, ttl, floor)
	}
	return nil
}
