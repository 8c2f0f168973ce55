package mongostore

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// FencedRead reads the item as the holder of fencing token token of the lock
// named fence, and registers that token on the item: it is one
// findOneAndUpdate
//
//	filter: {_id: sku, $or: [{fences.<fence>: {$lt: token}}, {fences.<fence>: {$exists: false}}]}
//	update: {$set: {fences.<fence>: token}}
//
// It returns ErrFenced when a token at least as high is already registered,
// that is when a newer holder (or this one, twice) has read the item.
//
// Why register at the read, and not only check at the write: fencing means
// that once a newer holder exists, no older holder's write may land. If the
// item learned of the newer token only at the newer holder's write, an old
// holder paused past its TTL could wake up and write in the gap between the
// newer holder's read and its write. The old write is accepted (no higher
// token stored yet), the newer holder then writes stock computed from what
// it read before, and the old sale vanishes: a lost update and an oversold
// unit, with the fence checked at every write. Registering the token at the
// read closes the gap: from the moment the newer holder has seen the stock,
// every older holder is rejected.
//
// The filter uses only $lt, $exists and $or, which both MongoDB and FerretDB
// v1 execute, so that the fence works on the embedded test store too.
func (s *Store) FencedRead(ctx context.Context, sku, fence string, token int64) (inventory.Item, error) {
	it, err := s.fencedRead(ctx, sku, fence, token)
	return it.item(), err
}

// fencedRead is FencedRead as the item document.
func (s *Store) fencedRead(ctx context.Context, sku, fence string, token int64) (itemDoc, error) {
	if err := checkFence(sku, fence, token); err != nil {
		return itemDoc{}, err
	}
	path := "fences." + fence
	var it itemDoc
	err := s.items.FindOneAndUpdate(ctx,
		bson.D{
			{Key: "_id", Value: sku},
			{Key: "$or", Value: bson.A{
				bson.D{{Key: path, Value: bson.D{{Key: "$lt", Value: token}}}},
				bson.D{{Key: path, Value: bson.D{{Key: "$exists", Value: false}}}},
			}},
		},
		bson.D{{Key: "$set", Value: bson.D{{Key: path, Value: token}}}},
		// No projection: FerretDB v1 does not implement findAndModify's
		// "fields" and fails the whole command.
		options.FindOneAndUpdate().SetReturnDocument(options.After),
	).Decode(&it)
	if errors.Is(err, mongo.ErrNoDocuments) {
		// The item is gone, or a newer token is registered.
		cur, err := s.getDoc(ctx, s.items, sku)
		switch {
		case errors.Is(err, inventory.ErrNotFound):
			return itemDoc{}, fmt.Errorf("%w: fenced read %q", inventory.ErrNotFound, sku)
		case err != nil:
			// The item exists or the lookup failed; either way the fenced
			// read did not apply, which is what the caller must know.
			return itemDoc{}, fmt.Errorf("%w: fenced read %q with token %d (and the item could not be read: %v)", inventory.ErrFenced, sku, token, err)
		}
		return itemDoc{}, fmt.Errorf("%w: fenced read %q with %s token %d (registered: %d)", inventory.ErrFenced, sku, fence, token, cur.Fences[fence])
	}
	if err != nil {
		// The fenced read writes only the token: whether or not it
		// landed, no stock was taken, so a cut connection here is
		// "unavailable", not "outcome unknown".
		return itemDoc{}, unreachable("fenced read", sku, err)
	}
	return it, nil
}

// FencedWrite sets the stock of sku, bumps its version and records o as
// pending, provided that the token registered for fence is still token and
// the version is still version, the one the holder read: one updateOne
//
//	filter: {_id: sku, fences.<fence>: token, version: version}
//	update: {$set: {stock: stock, pending.<order>: o}, $inc: {version: 1}}
//
// Both conditions are needed. The fence refuses a holder that a newer one
// has superseded, even if the newer one has not written yet (a paused
// holder's read predates the pause, so its version may still be current).
// The version refuses a write computed from stock that any other writer
// has changed since the read: another strategy, another lock, an atomic
// decrement, an administrative Put. Without it the write would set an
// absolute stock over their sales.
//
// It returns ErrFenced or ErrStale, having changed nothing, when a
// condition fails.
func (s *Store) FencedWrite(ctx context.Context, fence string, token, version, stock int64, o inventory.Order) error {
	if err := checkFence(o.SKU, fence, token); err != nil {
		return err
	}
	_, err := s.sell(ctx, sale{op: "fenced write", sku: o.SKU, orders: []inventory.Order{o}, qty: o.Qty, stock: &stock, blind: true,
		conds: []cond{fenceIs("fenced write", fence, token), versionIs("fenced write", version)}})
	return err
}

func checkFence(sku, fence string, token int64) error {
	if err := inventory.CheckSKU(sku); err != nil {
		return err
	}
	// A dot would make the fence name a deeper path in the document.
	if !fencePattern.MatchString(fence) || token <= 0 {
		return fmt.Errorf("%w: fence %q token %d: want a name of [a-z0-9-] and a positive token", inventory.ErrInvalid, fence, token)
	}
	return nil
}

var fencePattern = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)
