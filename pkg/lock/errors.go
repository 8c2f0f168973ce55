package lock

import "errors"

// Errors returned by Locker, Lease and every Backend. Test for them with
// errors.Is: backends wrap them with the key and the server's answer.
var (
	// ErrNotAcquired means another owner holds an unexpired lease on the key.
	// It is the normal answer of a contended TryAcquire, not a failure; a
	// blocking Acquire returns it only when its retry policy gives up.
	ErrNotAcquired = errors.New("lock: held by another owner")

	// ErrNotHeld means the caller's lease is no longer the current one: it
	// expired, another owner took the key over, or it was already released.
	// The call that returned it changed nothing on the server.
	ErrNotHeld = errors.New("lock: lease not held")

	// ErrLeaseLost is the cause (context.Cause) of a lease's Ctx when the
	// lease ended without Release: a refresh found another owner, or the
	// lease expired before a refresh succeeded.
	ErrLeaseLost = errors.New("lock: lease lost")

	// ErrReleased is the cause of a lease's Ctx after its owner released it.
	ErrReleased = errors.New("lock: lease released")

	// ErrInvalidArgument is wrapped by every error about bad input (an empty
	// or overlong key, a TTL under the floor, a nil client). Such calls are
	// rejected before any I/O.
	ErrInvalidArgument = errors.New("lock: invalid argument")
)
