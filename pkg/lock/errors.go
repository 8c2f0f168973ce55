package lock

import (
	"errors"
	"fmt"
)

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

	// ErrInvalidArgument is wrapped by every error about bad input. Such
	// calls are rejected before any I/O, and retrying them cannot help.
	// The errors below wrap it and say which argument was wrong.
	ErrInvalidArgument = errors.New("lock: invalid argument")

	// ErrBadKey: a key must be 1 to MaxKeyLen bytes.
	ErrBadKey = fmt.Errorf("%w: key must be 1 to %d bytes", ErrInvalidArgument, MaxKeyLen)

	// ErrBadOwner: an owner must be 1 to MaxKeyLen bytes. An empty owner
	// is refused because some backends mark a free key with it, and it
	// would match every other empty owner's lease.
	ErrBadOwner = fmt.Errorf("%w: owner must be 1 to %d bytes", ErrInvalidArgument, MaxKeyLen)

	// ErrBadTTL: a TTL must be positive, at least the Locker's floor (see
	// TTLFloor), and one the backend's server can keep (etcd: whole
	// seconds).
	ErrBadTTL = fmt.Errorf("%w: TTL out of range", ErrInvalidArgument)

	// ErrBadConfig: a constructor or an option was given something no lock
	// can be built on (a nil client or backend, a renewal fraction outside
	// [0, 1), a retry policy without a minimum, a backend setting out of
	// range).
	ErrBadConfig = fmt.Errorf("%w: bad configuration", ErrInvalidArgument)
)
