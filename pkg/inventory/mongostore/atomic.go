package mongostore

import (
	"context"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Atomic takes the stock with one conditional update and no lock:
//
//	findOneAndUpdate({_id: sku, stock: {$gte: qty}}, {$inc: {stock: -qty, version: 1}}, returnDocument: after)
//
// (with what every sale write carries: see "One sale write" in sale.go).
//
// The server evaluates the condition and applies the decrement as one
// single-document operation, so no interleaving can oversell, and there is
// no read-modify-write window to widen. It is the baseline every other
// strategy should be compared with: when the whole decision fits in one
// document update, no lock is needed.
type Atomic struct {
	store *Store
}

// NewAtomic returns the lock-free conditional-update strategy.
func NewAtomic(store *Store) *Atomic { return &Atomic{store: store} }

// Name returns strategy.Atomic.
func (a *Atomic) Name() string { return strategy.Atomic }

// Decrement implements Strategy: one sale of the item's own stock.
func (a *Atomic) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	o := a.store.newOrder(req, strategy.Atomic, 0)
	it, err := a.store.sell(ctx, sale{op: "atomic decrement", sku: req.SKU, orders: []inventory.Order{o}, qty: req.Qty})
	if err != nil {
		return inventory.Sale{}, err
	}
	return a.store.sold(ctx, o, it.Stock, 1), nil
}

var _ = addBuilder(strategy.Atomic, func(d Deps) (inventory.Strategy, error) { return NewAtomic(d.Store), nil })
