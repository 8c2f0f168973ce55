package mongostore

import (
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// transient reports whether err may pass by itself: a network error, a
// timeout, or a server that says so (the driver's retryable labels).
func transient(err error) bool {
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return true
	}
	// The embedded store (FerretDB on SQLite) answers a lock it waited for
	// too long, or a statement interrupted when another operation's client
	// went away, with an internal error: nothing was applied, and it
	// passes.
	var ce mongo.CommandError
	if errors.As(err, &ce) && (strings.Contains(ce.Message, "SQLITE_BUSY") || strings.Contains(ce.Message, "database is locked") ||
		strings.Contains(ce.Message, "interrupted (9)")) {
		return true
	}
	var le mongo.LabeledError
	if errors.As(err, &le) {
		return le.HasErrorLabel("RetryableWriteError") || le.HasErrorLabel("TransientTransactionError")
	}
	return false
}

// unreachable wraps the error of a read that comes before any sale:
// ErrStoreUnavailable when the error may pass by itself, so that the
// caller can tell "try again" from a bug.
func unreachable(op, sku string, err error) error {
	if neverSent(err) {
		return notSent(op, sku, err)
	}
	if transient(err) {
		return fmt.Errorf("%w: %s %q: %w", inventory.ErrStoreUnavailable, op, sku, err)
	}
	return fmt.Errorf("inventory: %s %q: %w", op, sku, err)
}

// neverSent reports whether err is of an operation that never left this
// process because no server could be selected to send it to: MongoDB
// could not be reached. The driver returns a server selection error only
// from an operation's first attempt; a retry that cannot select a server
// returns the error of the attempt before it, which may have been sent.
func neverSent(err error) bool {
	return errors.As(err, new(topology.ServerSelectionError))
}

// notSent is the error of an operation that neverSent: ErrStoreUnavailable,
// with the driver's error as text only. A selection that ran out with the
// request's deadline wraps context.DeadlineExceeded, and the store being
// unreachable, not the request's time, is what the caller must hear.
func notSent(op, sku string, err error) error {
	return fmt.Errorf("%w: %s %q, not sent: %v", inventory.ErrStoreUnavailable, op, sku, err)
}
