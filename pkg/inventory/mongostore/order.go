package mongostore

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"github.com/stocklock/stocklock/pkg/strategy"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// newOrder returns the order a decrement of req by strategy will record,
// before its stock write: the write stores it as pending. A strategy that
// knows the stock its write leaves sets Remaining before the write.
func (s *Store) newOrder(req inventory.Request, strategy string, fence int64) inventory.Order {
	id := req.OrderID
	if id == "" {
		id = newOrderID()
	}
	return inventory.Order{
		ID: id, SKU: req.SKU, Qty: req.Qty, Replica: s.replica, Strategy: strategy, Fence: fence, Key: req.Key,
		// BSON dates have millisecond precision; truncate so that the
		// order reads back exactly as it was written.
		At: time.Now().UTC().Truncate(time.Millisecond),
	}
}

// pendingPath is the item field that holds o while it is pending.
func pendingPath(id string) string { return "pending." + id }

// Orders returns one page of sku's orders, sorted by time and id. Following
// Next never repeats an order; an order recorded after a later page was
// read (it reaches the ledger a moment after its At) is on no page, so a
// listing is complete once the item has no pending orders.
// A malformed cursor or limit is ErrInvalid.
func (s *Store) Orders(ctx context.Context, q inventory.OrdersQuery) (inventory.OrdersPage, error) {
	if err := inventory.CheckSKU(q.SKU); err != nil {
		return inventory.OrdersPage{}, err
	}
	q.Limit = cmp.Or(q.Limit, inventory.DefaultOrdersLimit)
	if q.Limit < 1 || q.Limit > inventory.MaxOrdersLimit {
		return inventory.OrdersPage{}, fmt.Errorf("%w: limit %d: want 1 to %d", inventory.ErrInvalid, q.Limit, inventory.MaxOrdersLimit)
	}
	filter := bson.D{{Key: "sku", Value: q.SKU}}
	if !q.Since.IsZero() {
		filter = append(filter, bson.E{Key: "at", Value: bson.D{{Key: "$gte", Value: q.Since}}})
	}
	if q.After != "" {
		at, id, err := parseCursor(q.After)
		if err != nil {
			return inventory.OrdersPage{}, err
		}
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "at", Value: bson.D{{Key: "$gt", Value: at}}}},
			bson.D{{Key: "at", Value: at}, {Key: "_id", Value: bson.D{{Key: "$gt", Value: id}}}},
		}})
	}
	orders, err := findDocs[inventory.Order](ctx, s.orders, filter, options.Find().
		SetSort(bson.D{{Key: "at", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(int64(q.Limit)+1))
	if err != nil {
		return inventory.OrdersPage{}, fmt.Errorf("inventory: orders of %q: %w", q.SKU, err)
	}
	page := inventory.OrdersPage{Orders: orders}
	if len(page.Orders) > q.Limit {
		page.Orders = page.Orders[:q.Limit]
		last := page.Orders[q.Limit-1]
		page.Next = cursor(last.At, last.ID)
	}
	return page, nil
}

// cursor encodes the position after the order (at, id).
func cursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMilli(), 10) + "." + id))
}

func parseCursor(c string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	ms, id, ok := strings.Cut(string(raw), ".")
	n, perr := strconv.ParseInt(ms, 10, 64)
	if err != nil || !ok || perr != nil || id == "" {
		return time.Time{}, "", fmt.Errorf("%w: cursor %q: pass the next cursor of the previous page unchanged", inventory.ErrInvalid, c)
	}
	return time.UnixMilli(n).UTC(), id, nil
}

// sold records the order of a sale whose stock write has succeeded, and
// returns the Sale: it inserts o into the ledger, then removes o's pending
// entry from the item. The insert runs to completion even if ctx is
// cancelled (the sale has happened either way). If it fails, the sale
// still stands and its order stays pending in the item, for
// RecoverPending to record; the failure is logged and returned in
// Sale.LedgerErr.
func (s *Store) sold(ctx context.Context, o inventory.Order, remaining int64, attempts int) inventory.Sale {
	return s.soldTimed(ctx, o, remaining, attempts, stepTimer{})
}

// soldTimed is sold, reporting the ledger and unpend steps to steps.
func (s *Store) soldTimed(ctx context.Context, o inventory.Order, remaining int64, attempts int, steps stepTimer) inventory.Sale {
	return s.soldIn(ctx, o.SKU, o, remaining, attempts, steps)
}

// soldIn is soldTimed of a sale whose order is pending in document doc of
// the items collection (the item, or one of its buckets). A remaining
// below 0 is unknown, and not recorded.
func (s *Store) soldIn(ctx context.Context, doc string, o inventory.Order, remaining int64, attempts int, steps stepTimer) inventory.Sale {
	if remaining >= 0 {
		o.Remaining = &remaining
	}
	if attempts > 1 {
		o.Attempts = attempts
	}
	if s.afterTake != nil {
		s.afterTake(o)
	}
	sale := o.Sale()
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	if _, err := s.recordIn(cctx, doc, o, steps); err != nil {
		sale.LedgerErr = fmt.Errorf("inventory: record order %s of %q: %w", o.ID, o.SKU, err)
		s.logger.ErrorContext(ctx, "order not yet in the ledger: it stays pending in the item until recovery records it",
			slog.String("order_id", o.ID), slog.String("sku", o.SKU), slog.Int64("qty", o.Qty),
			slog.String("strategy", o.Strategy), slog.Int64("fence", o.Fence), slog.Any("error", err))
	}
	return sale
}

// record inserts o into the ledger and then clears its pending entry, in
// the item or in whichever of its buckets holds it (see Buckets). It is
// idempotent: the replica that sold and any replica recovering the sale
// may both record it, and the ledger keeps one order.
func (s *Store) record(ctx context.Context, o inventory.Order) error {
	doc := o.SKU
	if _, in, found, err := s.pendingInBuckets(ctx, s.items, o.SKU, o.ID); err == nil && found {
		doc = in
	}
	_, err := s.recordIn(ctx, doc, o, stepTimer{})
	return err
}

// recordIn is record of an order pending in document doc of the items
// collection (the item, or one of its buckets), reporting its two steps
// to steps. mine is false when the ledger already held the order at this
// call's first try, so that another caller recorded it (see retryInsert).
func (s *Store) recordIn(ctx context.Context, doc string, o inventory.Order, steps stepTimer) (mine bool, err error) {
	start := time.Now()
	mine, err = s.insertOrder(ctx, o)
	steps.since(strategy.StepLedger, start)
	if err != nil {
		return false, err
	}
	start = time.Now()
	_, err = s.items.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: doc}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: pendingPath(o.ID), Value: ""}}}})
	steps.since(strategy.StepUnpend, start)
	if err != nil {
		// The order is in the ledger; the stale entry only costs the next
		// recovery a duplicate insert.
		s.logger.WarnContext(ctx, "order recorded, but its pending entry could not be cleared",
			slog.String("order_id", o.ID), slog.String("sku", o.SKU), slog.Any("error", err))
	}
	return mine, nil
}

// order returns the ledger's order id of sku, or ErrNotFound. It reads
// with majority read concern (see committedOrders): its callers replay
// the order, or settle an attempt by it.
func (s *Store) order(ctx context.Context, sku, id string) (inventory.Order, error) {
	var o inventory.Order
	err := s.committedOrders.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&o)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return inventory.Order{}, fmt.Errorf("%w: order %s of %q", inventory.ErrNotFound, id, sku)
	}
	if err != nil {
		return inventory.Order{}, unreachable("read order "+id+" of", sku, err)
	}
	return o, nil
}

// RecoverPending records the pending orders (see Item.Pending) that are at
// least grace old, whoever sold them: the orders of a replica that died
// between its stock write and its ledger write, or whose ledger write
// failed. Every replica runs it at start-up and periodically; running it
// on several replicas at once is safe, since recording is idempotent. The
// grace only spares the duplicate work of recording orders whose replica is
// about to record them itself. It returns the number of orders this call
// put in the ledger: an order that the seller or another replica recorded
// first has its pending entry cleared but is not counted. A pass ends by
// the store's write timeout (see passContext).
func (s *Store) RecoverPending(ctx context.Context, grace time.Duration) (int, error) {
	ctx, cancel := s.passContext(ctx)
	defer cancel()
	items, err := findDocs[itemDoc](ctx, s.items, bson.D{{Key: "pending", Value: bson.D{
		{Key: "$exists", Value: true}, {Key: "$ne", Value: bson.D{}},
	}}})
	if err != nil {
		return 0, fmt.Errorf("inventory: find pending orders: %w", err)
	}
	cutoff := time.Now().Add(-grace)
	n := 0
	for _, it := range items {
		for id, o := range it.Pending {
			if o.At.After(cutoff) {
				continue
			}
			// it.SKU is the document's _id: the sku, or one of its
			// buckets (see Buckets).
			o.ID, o.SKU = id, skuOfDoc(it.SKU)
			mine, err := s.recordIn(ctx, it.SKU, o, stepTimer{})
			if err != nil {
				return n, fmt.Errorf("inventory: recover pending order %s of %q: %w", id, o.SKU, err)
			}
			if mine {
				n++
				s.logger.WarnContext(ctx, "recovered a pending order: its sale had taken the stock but was not in the ledger",
					slog.String("order_id", id), slog.String("sku", o.SKU), slog.Int64("qty", o.Qty),
					slog.String("sold_by", o.Replica), slog.String("strategy", o.Strategy))
			}
		}
	}
	return n, nil
}

// orderInsertAttempts bounds the tries of one order insert.
const orderInsertAttempts = 6

// insertOrder records o, trying again after an error that may be passing
// (a connection cut by a restarting server, a timeout, a primary stepping
// down), with a doubling pause from 50 ms, until ctx ends. The stock is
// already taken when it runs: giving up at the first cut connection would
// leave an acknowledged sale out of the ledger for longer. A duplicate key
// means recorded: the order's _id is fixed and random, so either an
// earlier try landed and only its reply was lost, or a recovering replica
// recorded the same pending order first.
func (s *Store) insertOrder(ctx context.Context, o inventory.Order) (mine bool, err error) {
	return retryInsert(ctx, func(ctx context.Context) error {
		_, err := s.orders.InsertOne(ctx, o)
		return err
	})
}

// retryInsert runs insert, an insert of one document with a fixed _id, as
// insertOrder describes. mine is false only for a duplicate key at the
// first try, which says that someone else inserted the document; a
// duplicate after a failed try may be that try's, and counts as mine.
func retryInsert(ctx context.Context, insert func(context.Context) error) (mine bool, err error) {
	wait := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err = insert(ctx)
		switch {
		case err == nil:
			return true, nil
		case mongo.IsDuplicateKeyError(err):
			return attempt > 1, nil
		case !transient(err):
			return false, err
		case attempt >= orderInsertAttempts:
			return false, fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		if cause := pause(ctx, wait); cause != nil {
			return false, fmt.Errorf("%w (gave up after %d attempts: %w)", err, attempt, cause)
		}
		wait *= 2
	}
}
