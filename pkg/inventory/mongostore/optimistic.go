package mongostore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// DefaultCASAttempts is the optimistic strategy's default number of
// compare-and-set attempts per decrement.
const DefaultCASAttempts = 20

// Backoff bounds between compare-and-set attempts.
const (
	casBackoffMin = time.Millisecond
	// The cap must let the attempts of all contenders spread wider than
	// one write takes: every failed compare-and-set is a write the store
	// must serve, and a cap too short keeps the store saturated with
	// doomed writes, which lengthens every read-to-write window and makes
	// more of them fail (docs/optimistic-vs-atomic.md).
	casBackoffMax = 250 * time.Millisecond
)

// Optimistic takes the stock without a lock, by compare-and-set on the
// version field: read stock and version, then
//
//	updateOne({_id: sku, version: v}, {$set: {stock: stock-qty}, $inc: {version: 1}})
//
// If another writer got in between, the version has moved, the update
// matches nothing, and the decrement starts over from a fresh read. The
// version, not the stock, is compared: comparing the stock would let an
// A-B-A sequence (a sale and a restock in between) pass unnoticed.
//
// Retries are bounded and spaced by capped exponential backoff with full
// jitter, so that contenders that collided do not collide again in
// lockstep; a decrement that loses every attempt returns ErrConflict.
type Optimistic struct {
	store    *Store
	delay    time.Duration
	attempts int
}

// NewOptimistic returns the compare-and-set strategy. attempts <= 0 means
// DefaultCASAttempts; delay is slept between each read and its write.
func NewOptimistic(store *Store, attempts int, delay time.Duration) *Optimistic {
	if attempts <= 0 {
		attempts = DefaultCASAttempts
	}
	return &Optimistic{store: store, delay: delay, attempts: attempts}
}

// Name returns strategy.Optimistic.
func (o *Optimistic) Name() string { return strategy.Optimistic }

// Decrement implements Strategy.
func (o *Optimistic) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	for n := 0; n < o.attempts; n++ {
		if n > 0 {
			if err := pause(ctx, casBackoff(n-1)); err != nil {
				return inventory.Sale{}, err
			}
		}
		it, err := o.store.getDoc(ctx, o.store.items, req.SKU)
		if err != nil {
			return inventory.Sale{}, err
		}
		if given := (inventory.Order{ID: req.OrderID, SKU: req.SKU, Key: req.Key}); req.OrderID != "" && gaveUp(it, given) {
			return inventory.Sale{}, abandoned("optimistic decrement", given)
		}
		if it.Stock < req.Qty {
			return inventory.Sale{}, soldOutOf(it, req.Qty)
		}
		if err := pause(ctx, o.delay); err != nil {
			return inventory.Sale{}, err
		}
		remaining := it.Stock - req.Qty
		order := o.store.newOrder(req, strategy.Optimistic, 0)
		order.Remaining = &remaining
		if n > 0 {
			order.Attempts = n + 1
		}
		// The compare-and-set: a write that matches nothing is not
		// explained, the next attempt reads again.
		op := fmt.Sprintf("compare-and-set at version %d of", it.Version)
		_, ok, err := o.store.writeOnce(ctx, sale{op: op, sku: req.SKU, orders: []inventory.Order{order}, qty: req.Qty,
			stock: &remaining, conds: []cond{versionIs(op, it.Version)}, blind: true})
		if err != nil {
			return inventory.Sale{}, err
		}
		if ok {
			return o.store.sold(ctx, order, remaining, n+1), nil
		}
	}
	return inventory.Sale{}, fmt.Errorf("%w: optimistic decrement %q: version changed under each of %d attempts", inventory.ErrConflict, req.SKU, o.attempts)
}

// casBackoff returns the sleep before retry n (from 0): uniform in
// [0, min(max, min*2^n)].
func casBackoff(n int) time.Duration {
	ceil := casBackoffMax
	if n < 16 {
		ceil = min(ceil, casBackoffMin<<n)
	}
	return rand.N(ceil + 1)
}

var _ = addBuilder(strategy.Optimistic, func(d Deps) (inventory.Strategy, error) {
	return NewOptimistic(d.Store, d.CASAttempts, d.Delay), nil
})
