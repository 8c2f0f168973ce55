package inventory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Order is one sale in the ledger.
type Order struct {
	ID       string    `bson:"_id" json:"order_id"`
	SKU      string    `bson:"sku" json:"sku"`
	Qty      int64     `bson:"qty" json:"qty"`
	Replica  string    `bson:"replica" json:"replica"`
	Strategy string    `bson:"strategy" json:"strategy"`
	Fence    int64     `bson:"fence" json:"fence"` // the lease token the stock write carried; 0 without a lock
	At       time.Time `bson:"at" json:"at"`
}

// newOrderID returns 16 random bytes in hex. Random, not sequential, so that
// replicas need no coordination to mint unique ids; a duplicate in the
// ledger therefore means an order recorded twice, never a collision.
func newOrderID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return hex.EncodeToString(b[:])
}

// Orders returns the orders of sku recorded at or after since (all of them
// for the zero time), oldest first.
func (s *Store) Orders(ctx context.Context, sku string, since time.Time) ([]Order, error) {
	if err := checkSKU(sku); err != nil {
		return nil, err
	}
	filter := bson.D{{Key: "sku", Value: sku}}
	if !since.IsZero() {
		filter = append(filter, bson.E{Key: "at", Value: bson.D{{Key: "$gte", Value: since}}})
	}
	cur, err := s.orders.Find(ctx, filter,
		options.Find().SetSort(bson.D{{Key: "at", Value: 1}, {Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("inventory: orders of %q: %w", sku, err)
	}
	orders := []Order{}
	if err := cur.All(ctx, &orders); err != nil {
		return nil, fmt.Errorf("inventory: orders of %q: %w", sku, err)
	}
	return orders, nil
}

// CountOrders returns the number of orders of sku.
func (s *Store) CountOrders(ctx context.Context, sku string) (int64, error) {
	if err := checkSKU(sku); err != nil {
		return 0, err
	}
	n, err := s.orders.CountDocuments(ctx, bson.D{{Key: "sku", Value: sku}})
	if err != nil {
		return 0, fmt.Errorf("inventory: count orders of %q: %w", sku, err)
	}
	return n, nil
}

// sold records the order of a sale whose stock write has succeeded, and
// returns the Sale. The insert runs to completion even if ctx is cancelled
// (the sale has happened either way). If it fails, the sale still stands:
// the failure is logged and returned in Sale.LedgerErr.
func (s *Store) sold(ctx context.Context, strategy, sku string, qty, remaining, fence int64, attempts int) Sale {
	o := Order{
		ID: newOrderID(), SKU: sku, Qty: qty, Replica: s.replica, Strategy: strategy, Fence: fence,
		// BSON dates have millisecond precision; truncate so that the
		// order reads back exactly as it was written.
		At: time.Now().UTC().Truncate(time.Millisecond),
	}
	sale := Sale{
		OrderID: o.ID, SKU: sku, Qty: qty, Remaining: remaining,
		Strategy: strategy, Replica: s.replica, Fence: fence, At: o.At, Attempts: attempts,
	}
	cctx, cancel := s.commitContext(ctx)
	defer cancel()
	if err := s.insertOrder(cctx, o); err != nil {
		sale.LedgerErr = fmt.Errorf("inventory: record order %s of %q: %w", o.ID, sku, err)
		s.logger.ErrorContext(ctx, "SALE NOT IN LEDGER: stock was taken but the order insert failed",
			slog.String("order_id", o.ID), slog.String("sku", sku), slog.Int64("qty", qty),
			slog.String("strategy", strategy), slog.Int64("fence", fence), slog.Any("error", err))
	}
	return sale
}

// orderInsertAttempts bounds the tries of one order insert.
const orderInsertAttempts = 6

// insertOrder records o, trying again after an error that may be passing
// (a connection cut by a restarting server, a timeout, a primary stepping
// down), with a doubling pause from 50 ms, until ctx ends. The stock is
// already taken when it runs: giving up at the first cut connection would
// leave an acknowledged sale out of the ledger. Retrying is safe because
// the order's _id is fixed: if an earlier try landed and only its reply
// was lost, the retry fails with a duplicate key, which means recorded.
func (s *Store) insertOrder(ctx context.Context, o Order) error {
	return retryInsert(ctx, func(ctx context.Context) error {
		_, err := s.orders.InsertOne(ctx, o)
		return err
	})
}

// retryInsert runs insert, an insert of one document with a fixed _id, as
// insertOrder describes.
func retryInsert(ctx context.Context, insert func(context.Context) error) error {
	pause := 50 * time.Millisecond
	var err error
	for attempt := 1; ; attempt++ {
		err = insert(ctx)
		switch {
		case err == nil:
			return nil
		case attempt > 1 && mongo.IsDuplicateKeyError(err):
			// An earlier attempt landed; only its reply was lost. On the
			// first attempt a duplicate is a real collision: say so.
			return nil
		case !transient(err):
			return err
		case attempt >= orderInsertAttempts:
			return fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up after %d attempts: %w)", err, attempt, context.Cause(ctx))
		case <-t.C:
		}
		pause *= 2
	}
}
