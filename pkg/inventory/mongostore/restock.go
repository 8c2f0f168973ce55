package mongostore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// restockAttempts bounds how often Restock decides again after its update
// matched nothing because the item changed between its read and its write
// (a sale, or another restock, moved the stock across the condition).
const restockAttempts = 5

// restockID is the item field name of a restock key: a hash, since a key
// may hold characters ("." "$") that a field name cannot.
func restockID(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:16])
}

// Restock adds qty units (removes -qty when qty is negative) to sku's
// stock, once per key: the item remembers the keys of its last
// restockKeys restocks, and a restock whose key it remembers
// changes nothing. The key is recorded and the stock changed by one
// conditional single-document update, so a restock whose answer was lost
// can be sent again, to any replica, and applies at most once; and it
// takes no lock: it commutes with every sale (the lock strategies' writes,
// conditional on the version they read, are refused as stale, and their
// clients retry them).
//
// It returns the item after the restock and replayed false or, for a key
// already applied with the same qty, the item as it is now and replayed
// true. A key applied with another qty is ErrKeyReused, a restock that
// would take the stock below zero an *InsufficientError, an unknown sku
// ErrNotFound; each changed nothing and leaves the key unused. An update
// whose answer was lost is ErrOutcomeUnknown: send it again with the same
// key.
func (s *Store) Restock(ctx context.Context, sku, key string, qty int64) (inventory.Item, bool, error) {
	if err := inventory.CheckRestock(sku, key, qty); err != nil {
		return inventory.Item{}, false, err
	}
	id := restockID(key)
	for range restockAttempts {
		// A committed read: a replay must not answer with a restock a
		// failover can roll back.
		v, err := s.read(ctx, s.committedItems, sku)
		if err != nil {
			return inventory.Item{}, false, err
		}
		// The sku's stock, its buckets' included (see Buckets): what a
		// restock is judged by and answers.
		cur := v.merged()
		if r, ok := cur.Restocks[id]; ok {
			if r.Qty != qty {
				return inventory.Item{}, false, fmt.Errorf("%w: restock %q: the key was applied with qty %d, this asks %d",
					inventory.ErrKeyReused, sku, r.Qty, qty)
			}
			return cur.item(), true, nil
		}
		bound := bson.E{Key: "stock", Value: bson.D{{Key: "$lte", Value: math.MaxInt64 - qty}}}
		switch {
		case qty < 0 && cur.Stock < -qty:
			return inventory.Item{}, false, &inventory.InsufficientError{SKU: sku, Stock: cur.Stock, Qty: qty}
		case qty > 0 && cur.Stock > math.MaxInt64-qty:
			return inventory.Item{}, false, fmt.Errorf("%w: restock %q by %d: stock %d would overflow", inventory.ErrInvalid, sku, qty, cur.Stock)
		case qty < 0 && v.item.Stock < -qty && v.item.Split != nil:
			// Split: the units are in the buckets. Merge them into the
			// item (exact: every bucket frozen first), and decide again.
			if _, _, err := s.mergeSplit(ctx, sku, v.item.Split.Gen); err != nil {
				return inventory.Item{}, false, err
			}
			continue
		case qty < 0:
			bound = bson.E{Key: "stock", Value: bson.D{{Key: "$gte", Value: -qty}}}
		}
		update := bson.D{
			{Key: "$inc", Value: bson.D{{Key: "stock", Value: qty}, {Key: "version", Value: int64(1)}}},
			{Key: "$set", Value: bson.D{{Key: "restocks." + id, Value: restock{Qty: qty, Seq: v.item.Version}}}},
		}
		if old := oldestRestocks(cur.Restocks); len(old) > 0 {
			update = append(update, bson.E{Key: "$unset", Value: old})
		}
		cctx, cancel := s.commitContext(ctx)
		var it itemDoc
		err = s.items.FindOneAndUpdate(cctx,
			bson.D{{Key: "_id", Value: sku}, {Key: "restocks." + id, Value: bson.D{{Key: "$exists", Value: false}}}, bound},
			update, options.FindOneAndUpdate().SetReturnDocument(options.After),
		).Decode(&it)
		cancel()
		if err == nil && it.Split == nil {
			return it.item(), false, nil
		}
		if err == nil {
			// Applied. The item's own stock is not the sku's: answer
			// the sku as it is now, the restock in it.
			after, err := s.Snapshot(ctx, sku)
			if err != nil {
				return inventory.Item{}, false, fmt.Errorf("inventory: restock %q applied; read it back (send it again with the same key): %w", sku, err)
			}
			return after, false, nil
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return inventory.Item{}, false, unknownOutcome("restock", sku, err)
		}
		// Nothing changed: the key was applied meanwhile, or the stock
		// moved across the bound. Read again and decide again.
	}
	return inventory.Item{}, false, fmt.Errorf("%w: restock %q: the item kept changing between read and write", inventory.ErrConflict, sku)
}

// oldestRestocks returns the fields to unset so that, with the restock
// being added, the item keeps at most restockKeys of them: the
// oldest of those it had. Restocks added by others since the read are not
// seen, so an item may briefly hold a few more; the next restock trims it.
func oldestRestocks(rs map[string]restock) bson.D {
	n := len(rs) - (restockKeys - 1)
	if n <= 0 {
		return nil
	}
	ids := slices.SortedFunc(maps.Keys(rs), func(a, b string) int {
		return cmp.Or(cmp.Compare(rs[a].Seq, rs[b].Seq), cmp.Compare(a, b))
	})
	var old bson.D
	for _, id := range ids[:n] {
		old = append(old, bson.E{Key: "restocks." + id, Value: ""})
	}
	return old
}
