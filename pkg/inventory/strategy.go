package inventory

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// Strategy is one way to take qty units of a sku's stock.
//
// Decrement returns the Sale when the stock was taken, and an error (see
// the package's Err variables) when it was not. It never reports a sale
// that did not happen. Every strategy takes the stock and records the
// sale's pending order in one single-document write, so a sale is never
// lost between the stock and the ledger; whether two concurrent decrements
// can both take the same unit is what distinguishes the strategies.
type Strategy interface {
	Name() string
	Decrement(ctx context.Context, req Request) (Sale, error)
}

// SellableReader is an optional interface of a Strategy, for the sold-out
// shortcut that pkg/inventory/mongostore's Build puts in front of the
// strategies it makes: once a sale of a sku has answered ErrSoldOut, the
// sales that follow read what is sellable, coalesced, instead of each
// paying the strategy's own sold out (a conditional update that misses, a
// lock round).
//
// Sellable returns how many units of sku a Decrement of the strategy
// could take at one moment between the call and its return, read from the
// store of record at that moment (never from a cache), with no write and
// no lock: a Decrement of more units, at that moment, would have answered
// ErrSoldOut. It counts exactly what the strategy sells: the units of
// expired holds when it takes them, the buckets of a split sku. Its errors
// are Decrement's (ErrNotFound, ErrStoreUnavailable, ...).
//
// A Strategy that does not implement it, and that the shortcut cannot
// read itself (its strategies of pkg/inventory/mongostore it can), gets no
// shortcut: every sale goes to its
// Decrement, and each sale after the last unit costs what that strategy's
// sold out costs. Nothing else changes: the shortcut only ever answers a
// sold out that Sellable justified, and sends every other sale to
// Decrement.
type SellableReader interface {
	Strategy
	Sellable(ctx context.Context, sku string) (int64, error)
}

// Request is one decrement: what to take, and the identity of the order it
// becomes.
type Request struct {
	SKU string
	Qty int64
	// OrderID is the id of the sale's order; empty means a fresh random
	// one. Store.DecrementOnce sets it, so that a retried request can find
	// the order of its first attempt.
	OrderID string
	// Key is the idempotency key the order records; empty means none.
	Key string
}

// Validate checks the request before any I/O: ErrInvalid, saying what is
// wrong, or nil.
func (r Request) Validate() error {
	if err := CheckSKU(r.SKU); err != nil {
		return err
	}
	if r.OrderID != "" && !orderIDPattern.MatchString(r.OrderID) {
		// The id is also a field name in the item document (Item.Pending).
		return fmt.Errorf("%w: order id %q must be 1 to 64 of [A-Za-z0-9_-]", ErrInvalid, r.OrderID)
	}
	if r.Key != "" && !ValidKey(r.Key) {
		return fmt.Errorf("%w: idempotency key must be 1 to %d printable ASCII characters", ErrInvalid, MaxKeyLen)
	}
	return CheckQty(r.Qty)
}

var orderIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidOrderID reports whether id is a well-formed order id: 1 to 64 of
// A-Z a-z 0-9 _ -.
func ValidOrderID(id string) bool { return orderIDPattern.MatchString(id) }

// Sale is a successful decrement.
type Sale struct {
	OrderID   string
	SKU       string
	Qty       int64
	Remaining int64 // the stock this sale left, as written; -1 when unknown (see Order.Remaining)
	Strategy  string
	Replica   string
	Fence     int64 // the lease token the stock write carried; 0 without a lock
	At        time.Time
	Attempts  int // compare-and-set attempts (optimistic); 1 otherwise

	// Key is the idempotency key of the request that made the sale.
	Key string

	// LedgerErr is set when the stock was taken but the order could not be
	// recorded yet. The sale stands: its order stays pending in the item
	// document, and Store.RecoverPending records it later.
	LedgerErr error
}
