package mongostore

import (
	"context"
	"errors"
	"fmt"

	"github.com/stocklock/stocklock/pkg/inventory"

	"github.com/stocklock/stocklock/pkg/strategy"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Atomic takes the stock with one conditional update and no lock:
//
//	findOneAndUpdate({_id: sku, stock: {$gte: qty}}, {$inc: {stock: -qty, version: 1}}, returnDocument: after)
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

// Decrement implements Strategy.
func (a *Atomic) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	o := a.store.newOrder(req, strategy.Atomic, 0)
	cctx, cancel := a.store.commitContext(ctx)
	defer cancel()
	for range takeAttempts {
		var it itemDoc
		err := a.store.items.FindOneAndUpdate(cctx,
			bson.D{{Key: "_id", Value: req.SKU}, {Key: "stock", Value: bson.D{{Key: "$gte", Value: req.Qty}}}, notAborted(o)},
			bson.D{
				{Key: "$inc", Value: bson.D{{Key: "stock", Value: -req.Qty}, {Key: "version", Value: int64(1)}}},
				{Key: "$set", Value: bson.D{{Key: pendingPath(o.ID), Value: o}}},
			},
			options.FindOneAndUpdate().SetReturnDocument(options.After),
		).Decode(&it)
		if err == nil {
			return a.store.sold(ctx, o, it.Stock, 1), nil
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return inventory.Sale{}, unknownOutcome("atomic decrement", req.SKU, err)
		}
		// Nothing changed. Say why: no such item, the attempt given up,
		// or not enough stock.
		cur, gerr := a.store.getDoc(ctx, a.store.items, req.SKU)
		if gerr != nil {
			return inventory.Sale{}, gerr
		}
		if gaveUp(cur, o) {
			return inventory.Sale{}, abandoned("atomic decrement", o)
		}
		if cur.Split == nil && cur.Stock >= req.Qty {
			// The item holds enough now: it changed after the update
			// (a merge of its buckets, a restock). Not a sold out: the
			// update decides again.
			continue
		}
		// Short: holds expired by the store's clock may cover it, in one
		// update that returns their units and sells (holds.go).
		if it, ok, err := a.store.sellExpired(ctx, cur, o); ok || err != nil {
			if err != nil {
				return inventory.Sale{}, err
			}
			return a.store.sold(ctx, o, it.Stock, 1), nil
		}
		return inventory.Sale{}, soldOutOf(cur, req.Qty)
	}
	return inventory.Sale{}, fmt.Errorf("%w: atomic decrement of %q: the item kept changing", inventory.ErrConflict, req.SKU)
}

var _ = addBuilder(strategy.Atomic, func(d Deps) (inventory.Strategy, error) { return NewAtomic(d.Store), nil })
