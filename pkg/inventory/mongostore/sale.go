package mongostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// # One sale write
//
// Every write that takes stock from an item document is built here, from
// a sale value that says what the strategy decided: the orders it sells
// (or the hold it takes), how many units, and the strategy's own
// conditions, each a cond value (the version it read, its fencing token,
// redis-stock's epoch), as etcd's concurrency.Mutex composes v3.Compare
// values into one Txn. What every such write needs is added here once:
//
//	filter: {_id: sku,
//	         <not given up>: aborted.<id> absent and aborted_through below each keyed order,
//	         <the strategy's conds>,
//	         stock: {$gte: need},
//	         <each expired hold it returns>: still held, as read}
//	update: {$inc: {stock: back - qty, version: 1, held: ...},
//	         $set: {pending.<id>: order, ...; holds.<id>.state: expired, ...},
//	         $unset: {pending.<id> of recorded orders}}
//
// need is qty less back, the units of the holds the store's clock says
// expired, which the same write returns when the item's own stock is
// short. A read-modify-write strategy that trusts its lock (unsafe, a lock
// without fencing) sets an absolute stock instead: that write is the
// lesson, and it has no stock condition.
//
// A write that matched nothing changed nothing. sell explains it once,
// from one read of the item: gone (ErrNotFound), given up (ErrAbandoned),
// a cond that no longer holds (its own error: ErrFenced, ErrStale, ...),
// short (sold out, saying whether the item is split; see soldOutOf), or
// changed since (a merge of its buckets, a restock): then it writes again.

// A sale is one write that takes stock: see "One sale write" above.
type sale struct {
	op  string // what the strategy calls it, for errors: "atomic decrement"
	sku string
	// doc is the document written when it is not the item: one of the
	// buckets strategy's buckets.
	doc string
	// orders are the sales the write takes the stock of: each is recorded
	// as pending in the same write, and none may be given up.
	orders []inventory.Order
	// hold, instead of orders, is a hold the write takes the stock into
	// (holds.<id>, held), on the condition that the item does not hold it
	// yet.
	hold *inventory.Hold
	qty  int64 // the units taken
	// stock, when set, is the absolute stock to write, computed from the
	// strategy's read, with no stock condition: see above.
	stock *int64
	// conds are the strategy's own conditions.
	conds []cond
	// read is the item as the strategy read it (under its lock, for its
	// version): a short stock is judged, and expired holds returned, from
	// it. Without it the first write is the plain one.
	read *itemDoc
	// unpend are pending entries of orders already in the ledger that the
	// same write clears (a batch's).
	unpend []string
	// recorded is a write that records sales another store decided and
	// acknowledged (redis-stock with --ack-redis): it must land, so it
	// carries no condition but the item.
	recorded bool
	// also are more fields the same write sets, and drop fields it
	// removes: a merge's (the split ends). A version among them replaces
	// the bump.
	also bson.D
	drop []string
	// blind is a write whose caller needs no document back (updateOne):
	// the item it answers holds only the stock, when it set it.
	blind bool
}

// A cond is one of a strategy's own conditions on a sale, a value as
// etcd's v3.Compare is: the filter it adds to the write, and, for a write
// that matched nothing, refused says from the item read after it whether
// the cond refused it and why (nil: it holds).
type cond struct {
	filter  bson.E
	refused func(it itemDoc) error
}

// versionIs holds while the item is at version v, the one the strategy
// read: it refuses a write computed from a stock that any other writer
// has changed since (ErrStale).
func versionIs(op string, v int64) cond {
	return cond{
		filter: bson.E{Key: "version", Value: v},
		refused: func(it itemDoc) error {
			if it.Version == v {
				return nil
			}
			return fmt.Errorf("%w: %s %q read at version %d (version now %d)", inventory.ErrStale, op, it.SKU, v, it.Version)
		},
	}
}

// fenceIs holds while token is the highest registered for fence (see
// FencedRead): it refuses a holder that a newer one superseded
// (ErrFenced).
func fenceIs(op, fence string, token int64) cond {
	return cond{
		filter: bson.E{Key: "fences." + fence, Value: token},
		refused: func(it itemDoc) error {
			if it.Fences[fence] == token {
				return nil
			}
			return fmt.Errorf("%w: %s %q with %s token %d (registered: %d)", inventory.ErrFenced, op, it.SKU, fence, token, it.Fences[fence])
		},
	}
}

// epochIs holds while the item is at redis-stock's epoch e: the stock in
// Redis that sold was loaded from it.
func epochIs(e int64) cond {
	return cond{
		filter: bson.E{Key: "epoch", Value: e},
		refused: func(it itemDoc) error {
			if it.Epoch == e {
				return nil
			}
			return fmt.Errorf("%w: redis-stock write of %q at epoch %d (epoch now %d)", errEpoch, it.SKU, e, it.Epoch)
		},
	}
}

// genIs holds while a bucket is at split generation gen: the split the
// buckets strategy sells from.
func genIs(gen int64) cond {
	return cond{
		filter:  bson.E{Key: "gen", Value: gen},
		refused: func(itemDoc) error { return errSplitChanged },
	}
}

// splitIs holds while the item is split at generation gen.
func splitIs(gen int64) cond {
	return cond{
		filter: bson.E{Key: "split.gen", Value: gen},
		refused: func(it itemDoc) error {
			if it.Split != nil && it.Split.Gen == gen {
				return nil
			}
			return errSplitChanged
		},
	}
}

// errSplitChanged refuses a write of a split that another writer ended
// or moved: the buckets strategy reads again.
var errSplitChanged = errors.New("mongostore: the split changed")

// errEpoch is epochIs's refusal.
var errEpoch = errors.New("mongostore: another epoch")

// errHoldExists refuses a hold whose id the item already holds: a retry
// of a create whose first write landed.
var errHoldExists = errors.New("mongostore: hold exists")

// errMissed is a write (Store.write) that matched nothing, not explained.
var errMissed = errors.New("mongostore: the write matched nothing")

// takeAttempts bounds the writes of one sale whose item keeps changing.
const takeAttempts = 4

// sell writes sl: the plain write first (or, from sl.read, the write that
// returns the expired holds a short stock needs), then, while the item
// changed under it, again from the item as it read it. It returns the item
// after the write, or why nothing changed (see "One sale write").
func (s *Store) sell(ctx context.Context, sl sale) (itemDoc, error) {
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	cur := sl.read
	for range takeAttempts {
		var expired []string
		if cur != nil && sl.stock == nil && cur.Stock < sl.qty {
			// Short: the holds expired by the store's clock may cover it.
			ids, units, err := s.expiredOf(ctx, *cur)
			if err != nil {
				return itemDoc{}, err
			}
			if cur.Stock+units < sl.qty {
				return itemDoc{}, soldOutOf(*cur, sl.qty)
			}
			expired = ids
		}
		it, err := s.write(cctx, sl, cur, expired)
		if !errors.Is(err, errMissed) {
			return it, err
		}
		read, err := s.getDoc(ctx, s.items, sl.sku)
		if err != nil {
			return itemDoc{}, err
		}
		if err := sl.refused(read); err != nil {
			return itemDoc{}, err
		}
		if sl.stock != nil || sl.recorded {
			// Nothing refused it, the item is there: it changed between
			// the write and the read. An absolute stock is not written
			// again over that change.
			return itemDoc{}, fmt.Errorf("%w: %s %q: the item changed under the write", inventory.ErrConflict, sl.op, sl.sku)
		}
		if read.Stock < sl.qty && len(read.Holds) == 0 {
			return itemDoc{}, soldOutOf(read, sl.qty)
		}
		cur = &read
	}
	return itemDoc{}, fmt.Errorf("%w: %s %q: the item kept changing", inventory.ErrConflict, sl.op, sl.sku)
}

// refused says why the item it, read after sl's write matched nothing,
// refused the write (nil: none of its conditions did): an order or the
// hold given up, the hold there already, or a cond of the strategy's.
func (sl sale) refused(it itemDoc) error {
	if sl.recorded {
		return nil
	}
	if sl.hold != nil {
		if _, ok := it.Holds[sl.hold.ID]; ok {
			return errHoldExists
		}
	}
	for _, o := range sl.attempts() {
		if gaveUp(it, o) {
			return abandoned(sl.op, o)
		}
	}
	for _, c := range sl.conds {
		if err := c.refused(it); err != nil {
			return err
		}
	}
	return nil
}

// attempts are the orders whose attempts sl must not have given up: its
// orders, or its hold's.
func (sl sale) attempts() []inventory.Order {
	if sl.hold != nil {
		return []inventory.Order{{ID: sl.hold.ID, SKU: sl.hold.SKU, Key: sl.hold.Key}}
	}
	return sl.orders
}

// write sends sl once, returning the holds expired, of those cur holds,
// in the same write; it answers errMissed when the write matched nothing
// (nothing changed), and the item after the write otherwise.
func (s *Store) write(ctx context.Context, sl sale, cur *itemDoc, expired []string) (itemDoc, error) {
	filter := bson.D{{Key: "_id", Value: cmp.Or(sl.doc, sl.sku)}}
	if !sl.recorded {
		if attempts := sl.attempts(); len(attempts) > 0 {
			filter = append(filter, notAborted(attempts...))
		}
		for _, c := range sl.conds {
			filter = append(filter, c.filter)
		}
	}
	set, unset := slices.Clone(sl.also), unsetPending(sl.unpend)
	var inc bson.D
	if !slices.ContainsFunc(sl.also, func(e bson.E) bool { return e.Key == "version" }) {
		inc = bson.D{{Key: "version", Value: int64(1)}}
	}
	back := int64(0) // the units of the expired holds returned
	for _, id := range expired {
		back += cur.Holds[id].Qty
		set = append(set, bson.E{Key: holdPath(id, "state"), Value: inventory.HoldExpired})
	}
	if len(expired) > 0 {
		filter = append(filter, holdConds(*cur, expired)...)
	}
	switch {
	case sl.stock != nil:
		set = append(set, bson.E{Key: "stock", Value: *sl.stock})
	default:
		if need := sl.qty - back; need > 0 && !sl.recorded {
			filter = append(filter, bson.E{Key: "stock", Value: bson.D{{Key: "$gte", Value: need}}})
		}
		inc = append(inc, bson.E{Key: "stock", Value: back - sl.qty})
	}
	held := -back
	for _, o := range sl.orders {
		set = append(set, bson.E{Key: pendingPath(o.ID), Value: o})
	}
	if h := sl.hold; h != nil {
		filter = append(filter, bson.E{Key: holdPath(h.ID), Value: bson.D{{Key: "$exists", Value: false}}})
		set = append(set, bson.E{Key: holdPath(h.ID), Value: *h})
		held += sl.qty
	}
	if held != 0 {
		inc = append(inc, bson.E{Key: "held", Value: held})
	}
	for _, f := range sl.drop {
		unset = append(unset, bson.E{Key: f, Value: ""})
	}
	var update bson.D
	for _, op := range []bson.E{{Key: "$set", Value: set}, {Key: "$inc", Value: inc}, {Key: "$unset", Value: unset}} {
		if len(op.Value.(bson.D)) > 0 {
			update = append(update, op)
		}
	}
	var it itemDoc
	var err error
	if sl.blind {
		var res *mongo.UpdateResult
		if res, err = s.items.UpdateOne(ctx, filter, update); err == nil && res.MatchedCount == 0 {
			err = mongo.ErrNoDocuments
		}
		if it.SKU = sl.sku; sl.stock != nil {
			it.Stock = *sl.stock
		}
	} else {
		err = s.items.FindOneAndUpdate(ctx, filter, update,
			options.FindOneAndUpdate().SetReturnDocument(options.After),
		).Decode(&it)
	}
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return itemDoc{}, errMissed
	case err != nil && len(sl.attempts()) == 0:
		// It sells nothing (a merge alone): its outcome does not matter.
		return itemDoc{}, unreachable(sl.op, sl.sku, err)
	case err != nil:
		return itemDoc{}, unknownOutcome(sl.op, sl.sku, err)
	}
	return it, nil
}

// writeOnce is write of sl, returning the holds expired of those sl.read
// holds, in a context that runs it to completion once sent
// (commitContext): ok is false, with no error, when it matched nothing,
// and nothing changed. Its caller explains a miss, or reads again.
func (s *Store) writeOnce(ctx context.Context, sl sale, expired ...string) (it itemDoc, ok bool, err error) {
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	it, err = s.write(cctx, sl, sl.read, expired)
	if errors.Is(err, errMissed) {
		return itemDoc{}, false, nil
	}
	return it, err == nil, err
}

// remainings sets the Remaining of each order of one sale write that left
// after: each as if the orders had been sold one by one in their order,
// the last leaving after.
func remainings(orders []*inventory.Order, after int64) {
	left := after
	for i := len(orders) - 1; i >= 0; i-- {
		remaining := left
		orders[i].Remaining = &remaining
		left += orders[i].Qty
	}
}

// expiredOf returns the holds of it expired by the store's clock, and
// their units (see expiredHolds).
func (s *Store) expiredOf(ctx context.Context, it itemDoc) ([]string, int64, error) {
	if len(it.Holds) == 0 {
		return nil, 0, nil
	}
	lower, err := s.storeTime(ctx, false)
	if err != nil {
		return nil, 0, unreachable("read the store's clock for the expired holds of", it.SKU, err)
	}
	ids, units := expiredHolds(it, lower)
	return slices.Clip(ids), units, nil
}
