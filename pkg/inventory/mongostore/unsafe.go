package mongostore

import (
	"context"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// Unsafe is the read-modify-write with no protection at all: read the
// stock, check it, write back stock-qty. Two requests that read the same
// stock both pass the check and both write the same result, so one sale is
// not subtracted (a lost update) and, at the last unit, the unit is sold
// twice. It is here to be watched failing.
type Unsafe struct {
	store *Store
	delay time.Duration
}

// NewUnsafe returns the unprotected strategy. delay is slept between the
// read and the write, to widen the race window for demonstrations.
func NewUnsafe(store *Store, delay time.Duration) *Unsafe {
	return &Unsafe{store: store, delay: delay}
}

// Name returns strategy.Unsafe.
func (u *Unsafe) Name() string { return strategy.Unsafe }

// Decrement implements Strategy, incorrectly under concurrency.
func (u *Unsafe) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	it, err := u.store.getDoc(ctx, u.store.items, req.SKU)
	if err != nil {
		return inventory.Sale{}, err
	}
	if it.Stock < req.Qty {
		return inventory.Sale{}, soldOut(req.SKU, it.Stock, req.Qty)
	}
	if err := pause(ctx, u.delay); err != nil {
		return inventory.Sale{}, err
	}
	remaining := it.Stock - req.Qty
	o := u.store.newOrder(req, strategy.Unsafe, 0)
	o.Remaining = &remaining
	cctx, cancel := u.store.commitContext(ctx)
	defer cancel()
	if err := u.store.setStock(cctx, remaining, o); err != nil {
		return inventory.Sale{}, err
	}
	return u.store.sold(ctx, o, remaining, 1), nil
}

var _ = addBuilder(strategy.Unsafe, func(d Deps) (inventory.Strategy, error) { return NewUnsafe(d.Store, d.Delay), nil })
