package inventory

import (
	"context"
	"time"
)

// Names of the strategies, in teaching order: the two that fail first.
const (
	NameUnsafe     = "unsafe"
	NameLocal      = "local"
	NameMongoLease = "mongo-lease"
	NameRedisLock  = "redis-lock"
	NameEtcdLock   = "etcd-lock"
	NameOptimistic = "optimistic"
	NameAtomic     = "atomic"
)

// Names returns the names of all strategies, in teaching order.
func Names() []string {
	return []string{NameUnsafe, NameLocal, NameMongoLease, NameRedisLock, NameEtcdLock, NameOptimistic, NameAtomic}
}

// Strategy is one way to take qty units of a sku's stock.
//
// Decrement returns the Sale when the stock was taken, and an error (see
// the package's Err variables) when it was not. It never reports a sale
// that did not happen; whether it can take stock that it then does not
// report, or report a sale twice, is what distinguishes the strategies.
type Strategy interface {
	Name() string
	Decrement(ctx context.Context, sku string, qty int64) (Sale, error)
}

// Sale is a successful decrement.
type Sale struct {
	OrderID   string
	SKU       string
	Qty       int64
	Remaining int64 // the stock this sale left, as written
	Strategy  string
	Replica   string
	Fence     int64 // the lease token the stock write carried; 0 without a lock
	At        time.Time
	Attempts  int // compare-and-set attempts (optimistic); 1 otherwise

	// LedgerErr is set when the stock was taken but the order could not be
	// recorded. The sale stands; the ledger is short by one order.
	LedgerErr error
}

// pause waits d inside the read-modify-write window (the teaching knob that
// widens the race), or returns early with ctx's cause.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// soldOut returns the ErrSoldOut of a decrement that found stock < qty.
func soldOut(sku string, stock, qty int64) error {
	return &SoldOutError{SKU: sku, Stock: stock, Qty: qty}
}
