package lock

import (
	"context"
	"fmt"
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

// TTLFloor is implemented by backends whose server cannot keep leases
// shorter than some minimum (etcd's lease TTL is whole seconds, for example).
type TTLFloor interface {
	MinTTL() time.Duration
}

// CheckArgs is the argument check every Backend makes before any I/O, so
// that a backend used without a Locker rejects the same input a Locker does:
// a key must be 1 to MaxKeyLen bytes, and an owner must be non-empty (an
// empty owner is how some backends mark a key free) and at most MaxKeyLen
// bytes.
func CheckArgs(key, owner string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, the limit is %d", ErrInvalidArgument, len(key), MaxKeyLen)
	case owner == "":
		return fmt.Errorf("%w: empty owner", ErrInvalidArgument)
	case len(owner) > MaxKeyLen:
		return fmt.Errorf("%w: owner is %d bytes, the limit is %d", ErrInvalidArgument, len(owner), MaxKeyLen)
	}
	return nil
}
