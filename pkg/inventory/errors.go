package inventory

import (
	"errors"
	"fmt"
)

// Errors returned by Store and every Strategy. Test for them with errors.Is;
// they are wrapped with the sku and the cause. A call that returns any of
// them sold nothing and recorded no order.
var (
	// ErrNotFound means no item has the sku.
	ErrNotFound = errors.New("inventory: item not found")

	// ErrSoldOut means the item has less stock than asked for. Nothing was
	// changed. The error is a *SoldOutError, which tells the stock seen.
	ErrSoldOut = errors.New("inventory: sold out")

	// ErrInsufficient means a restock would take the item's stock below
	// zero. Nothing was changed. The error is an *InsufficientError.
	ErrInsufficient = errors.New("inventory: not enough stock to remove")

	// ErrLockUnavailable means the lock on the item could not be acquired
	// within the strategy's wait budget.
	ErrLockUnavailable = errors.New("inventory: lock unavailable")

	// ErrLeaseLost means the lock was lost (expired, taken over or released
	// at shutdown) before the stock write was sent, so it was not sent.
	ErrLeaseLost = errors.New("inventory: lease lost before the write")

	// ErrFenced means a holder with a newer fencing token has read the item
	// since this lease was granted, so this holder's read or write was
	// rejected by the database. It is the fence doing its job.
	ErrFenced = errors.New("inventory: fenced out by a newer lock holder")

	// ErrStale means the item changed between a lock holder's read and its
	// write: another writer (another strategy, another lock, an
	// administrative Put) took stock or set it in between, so the write,
	// computed from what was read, was refused. Nothing was changed.
	ErrStale = errors.New("inventory: item changed since it was read")

	// ErrKeyReused means an idempotency key already names a decrement with
	// a different request (another qty or strategy). Nothing was changed.
	ErrKeyReused = errors.New("inventory: idempotency key reused for a different request")

	// ErrInProgress means another decrement with the same idempotency key
	// is still running and has not yet sold or failed. Nothing was changed
	// by this call; asking again later returns that decrement's sale.
	ErrInProgress = errors.New("inventory: a decrement with this idempotency key is in progress")

	// ErrAbandoned means that recovery gave up this request's idempotency
	// attempt before its stock write landed: its replica looked dead, or
	// the attempt outlived StoreOptions.AbandonAfter. Giving it up fenced
	// its order id out of the item, so the write was refused and nothing
	// was changed; a retry with the same key takes the key over.
	ErrAbandoned = errors.New("inventory: idempotency attempt abandoned before its stock write")

	// ErrConflict means the optimistic strategy lost the compare-and-set on
	// every one of its attempts.
	ErrConflict = errors.New("inventory: too many concurrent writers")

	// ErrOutcomeUnknown means the write that takes the stock was sent but
	// its answer never came back (a timeout, a dropped connection, a write
	// concern error): the stock may or may not have been taken, and no
	// order was recorded. It is the one error after which the books may
	// not balance; it is wrapped with the cause and should be investigated.
	ErrOutcomeUnknown = errors.New("inventory: outcome of the stock write unknown")

	// ErrStoreUnavailable means the store could not be reached, or did not
	// answer, before anything was sold (a restarting server, a cut
	// connection, a primary stepping down): nothing was taken and no order
	// recorded, so the request may be retried.
	ErrStoreUnavailable = errors.New("inventory: store unavailable")

	// ErrInvalid means an argument was rejected before any I/O: a malformed
	// sku, a non-positive quantity, a negative stock.
	ErrInvalid = errors.New("inventory: invalid argument")
)

// SoldOutError is the ErrSoldOut of a decrement: how much stock the item had
// when the strategy looked, and how much was asked for.
type SoldOutError struct {
	SKU   string
	Stock int64
	Qty   int64
}

func (e *SoldOutError) Error() string {
	return fmt.Sprintf("inventory: %q sold out: %d in stock, %d asked", e.SKU, e.Stock, e.Qty)
}

// Unwrap makes errors.Is(err, ErrSoldOut) true.
func (e *SoldOutError) Unwrap() error { return ErrSoldOut }

// InsufficientError is the ErrInsufficient of a restock: the stock it
// found, and the (negative) qty asked for.
type InsufficientError struct {
	SKU   string
	Stock int64
	Qty   int64
}

func (e *InsufficientError) Error() string {
	return fmt.Sprintf("inventory: %q: %d in stock, a restock of %d would leave it below zero", e.SKU, e.Stock, e.Qty)
}

// Unwrap makes errors.Is(err, ErrInsufficient) true.
func (e *InsufficientError) Unwrap() error { return ErrInsufficient }
