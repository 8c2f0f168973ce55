package inventory

import (
	"context"
	"errors"

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

// Name returns NameAtomic.
func (a *Atomic) Name() string { return NameAtomic }

// Decrement implements Strategy.
func (a *Atomic) Decrement(ctx context.Context, sku string, qty int64) (Sale, error) {
	if err := checkSKU(sku); err != nil {
		return Sale{}, err
	}
	if err := checkQty(qty); err != nil {
		return Sale{}, err
	}
	if err := ctx.Err(); err != nil {
		return Sale{}, context.Cause(ctx)
	}
	cctx, cancel := a.store.commitContext(ctx)
	defer cancel()
	var it Item
	err := a.store.items.FindOneAndUpdate(cctx,
		bson.D{{Key: "_id", Value: sku}, {Key: "stock", Value: bson.D{{Key: "$gte", Value: qty}}}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "stock", Value: -qty}, {Key: "version", Value: int64(1)}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After),
	).Decode(&it)
	if errors.Is(err, mongo.ErrNoDocuments) {
		// Nothing changed. Say why: no such item, or not enough stock.
		cur, gerr := a.store.Get(ctx, sku)
		if gerr != nil {
			return Sale{}, gerr
		}
		return Sale{}, soldOut(sku, cur.Stock, qty)
	}
	if err != nil {
		return Sale{}, unknownOutcome("atomic decrement", sku, err)
	}
	return a.store.sold(ctx, NameAtomic, sku, qty, it.Stock, 0, 1), nil
}
