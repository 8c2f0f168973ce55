package mongostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// # The answer that does not wait
//
// DecrementAsync is queued's second answer mode: the buyer is told that
// its order is in the log, and polls for the outcome (OrderState). The
// queued_orders collection holds, by order id, each order accepted this
// way, written once the stream has acknowledged the publish, and each
// order the consumer refused, waited for or not:
//
//	{_id: <order id>, sku, qty, replica, strategy, at, key,
//	 refused: {code, stock, split}}  (refused: once the consumer refused it)
//
// The outcome is found where a waiting buyer's is decided, once:
//
//   - sold: the ledger (or the item's pending entry), as for every sale;
//   - refused (sold out, given up, no item): refused, written by the
//     consumer before it answers and acknowledges, so a refusal is never
//     lost; a redelivered order that carries one is answered it again,
//     never applied (refusedBefore): a buyer told sold out, whose
//     consumer died before its ack, is not sold to after a restock, and a
//     keyed retry after that sold out (the key freed) sells only once;
//   - neither: queued, the consumer has not decided it yet.
//
// A sale and a refusal of one message never both happen: the consumer
// refuses only an order it did not write, and on a redelivery it looks
// for the sale (applied) and the refusal before it decides again. So a
// poll and the ledger never disagree.

// QueuedOrdersCollection holds the orders queued accepted without
// waiting for their outcome, and those its consumer refused (see "The
// answer that does not wait").
const QueuedOrdersCollection = "queued_orders"

// queuedOrder is a document of QueuedOrdersCollection.
type queuedOrder struct {
	inventory.Order `bson:",inline"`
	Refused         *queuedAnswer `bson:"refused,omitempty"`
}

func (s *Store) queuedOrders() *mongo.Collection {
	return s.items.Database().Collection(QueuedOrdersCollection)
}

// OrderState is what became of an order, as a poll sees it: sold (Sale),
// refused (Err, the error its waiting buyer would have got), or neither
// yet (queued: Order, as accepted).
type OrderState struct {
	Order inventory.Order
	Sold  bool
	Sale  inventory.Sale
	Err   error
}

// Queued reports whether the order waits in the log, undecided.
func (st OrderState) Queued() bool { return !st.Sold && st.Err == nil }

// ErrOrderNotFound is OrderState's answer for an order id that names no
// sale of the sku and no order queued accepted for it.
var ErrOrderNotFound = errors.New("inventory: no such order")

// DecrementAsync publishes the sale of req to the log and returns as soon
// as the stream has acknowledged it and its document is written: the
// order is queued, and OrderState tells its outcome later. match stands
// for the rest of the request, as in DecrementOnce.
//
// With req.Key, it runs at most once per sku and key, as DecrementOnce
// does: the first call reserves the key (its order id) and publishes; a
// later call with the same key and request answers that order as
// OrderState has it (replayed true), queued, sold or refused, and
// publishes nothing; one while the first is still publishing answers
// ErrInProgress; another request with the key, ErrKeyReused. Once the
// order is in the log the attempt is over: the consumer settles it. If
// the replica dies before that, recovery gives the attempt up as for
// any keyed request, and the consumer refuses the order (abandoned).
func (q *Queued) DecrementAsync(ctx context.Context, req inventory.Request, match string) (OrderState, bool, error) {
	if err := req.Validate(); err != nil {
		return OrderState{}, false, err
	}
	if req.OrderID != "" {
		return OrderState{}, false, fmt.Errorf("%w: DecrementAsync chooses the order id itself", inventory.ErrInvalid)
	}
	if req.Key == "" {
		o, err := q.accept(ctx, q.store.newOrder(req, QueuedName, 0))
		return OrderState{Order: o}, false, err
	}
	if !inventory.ValidKey(req.Key) {
		return OrderState{}, false, fmt.Errorf("%w: idempotency key must be 1 to %d printable ASCII characters", inventory.ErrInvalid, inventory.MaxKeyLen)
	}
	s := q.store
	fp := fingerprint(req, match)
	for range 3 {
		rec, mine, err := s.reserve(ctx, req, fp)
		if err != nil {
			return OrderState{}, false, err
		}
		if !mine && rec.Request != fp {
			return OrderState{}, false, fmt.Errorf("%w: idempotency key %q of %q", inventory.ErrKeyReused, req.Key, req.SKU)
		}
		if !mine {
			st, err := s.OrderState(ctx, rec.SKU, rec.OrderID)
			if !errors.Is(err, ErrOrderNotFound) {
				return st, err == nil, err // queued, sold or refused; or no item
			}
			// Not in the log yet (its request is publishing), or never
			// (its replica died first, and recovery gave it up).
			_, sold, aborted, err := s.outcome(ctx, rec)
			switch {
			case err != nil:
				return OrderState{}, false, err
			case sold:
				continue // sold meanwhile: OrderState finds it
			case !aborted:
				gaveUp, err := s.giveUpIfOverdue(ctx, rec)
				if err != nil {
					return OrderState{}, false, err
				}
				if !gaveUp {
					return OrderState{}, false, fmt.Errorf("%w: idempotency key %q of %q", inventory.ErrInProgress, req.Key, req.SKU)
				}
				continue
			}
			if rec, mine, err = s.takeOver(ctx, rec, req, fp); err != nil {
				return OrderState{}, false, err
			} else if !mine {
				continue
			}
		}
		return q.acceptReserved(ctx, req, rec)
	}
	return OrderState{}, false, fmt.Errorf("%w: idempotency key %q of %q", inventory.ErrInProgress, req.Key, req.SKU)
}

// acceptReserved publishes the order of the key this call reserved (rec).
func (q *Queued) acceptReserved(ctx context.Context, req inventory.Request, rec keyRecord) (OrderState, bool, error) {
	s := q.store
	defer s.inFlight.remove(rec.OrderID)
	req.OrderID = rec.OrderID
	o, err := q.accept(ctx, s.newOrder(req, QueuedName, 0))
	switch {
	case err == nil:
		// In the log, with its document: the consumer settles it, and
		// recovery must not give it up.
		s.endAttempt(ctx, rec)
	case errors.Is(err, inventory.ErrOutcomeUnknown):
		// Maybe in the log: the attempt stays, for recovery to give up
		// (the consumer then refuses it) unless it sold first.
	default:
		s.freeKey(ctx, rec, true) // nothing is in the log
	}
	return OrderState{Order: o}, false, err
}

// accept publishes o, with no inbox to answer, and writes its document
// once the stream has acknowledged it. The message id is the
// order's: a publish sent again is a duplicate the stream drops.
func (q *Queued) accept(ctx context.Context, o inventory.Order) (inventory.Order, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return o, err
	}
	msg := nats.NewMsg(q.subject(partition(o.SKU)))
	msg.Data = data
	if err := q.publish(ctx, msg, o, o.ID); err != nil {
		return o, err
	}
	// In the log: it will be decided whatever happens to this request.
	cctx, cancel := q.store.commitContext(ctx)
	defer cancel()
	if _, err := q.store.queuedOrders().InsertOne(cctx, queuedOrder{Order: o}); err != nil && !mongo.IsDuplicateKeyError(err) {
		// A duplicate is the consumer's refusal, written first.
		return o, fmt.Errorf("%w: queued decrement %q: order %s is in the log, and its document could not be written: %w",
			inventory.ErrOutcomeUnknown, o.SKU, o.ID, err)
	}
	return o, nil
}

// OrderState tells what became of order id of sku (see "The answer that
// does not wait"): sold, as the ledger has it, or, still pending in the
// item, from its pending entry with Sale.LedgerErr set (recovery records
// it); refused, as the consumer recorded it; or queued. It only reads.
// ErrOrderNotFound when the sku has no such order, ErrNotFound when it
// has no item either.
func (s *Store) OrderState(ctx context.Context, sku, id string) (OrderState, error) {
	if err := inventory.CheckSKU(sku); err != nil {
		return OrderState{}, err
	}
	// The ledger, the item, the ledger again: recording inserts the order
	// into the ledger before it clears the pending entry, so a sale is
	// seen by one of the three reads. The queued order's document last:
	// the consumer refuses only what it did not sell.
	if st, ok, err := s.soldOrder(ctx, sku, id); ok || err != nil {
		return st, err
	}
	v, err := s.read(ctx, s.committedItems, sku)
	noItem := errors.Is(err, inventory.ErrNotFound)
	if err != nil && !noItem {
		return OrderState{}, err
	}
	if !noItem {
		if p, ok := v.merged().Pending[id]; ok {
			p.ID, p.SKU = id, sku
			sale := p.Sale()
			sale.LedgerErr = fmt.Errorf("inventory: order %s of %q is pending in the item: not in the ledger yet", id, sku)
			return OrderState{Order: p, Sold: true, Sale: sale}, nil
		}
	}
	if st, ok, err := s.soldOrder(ctx, sku, id); ok || err != nil {
		return st, err
	}
	var d queuedOrder
	err = s.queuedOrders().FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments) || err == nil && d.SKU != sku:
		if noItem {
			return OrderState{}, fmt.Errorf("%w: order %s of %q", inventory.ErrNotFound, id, sku)
		}
		return OrderState{}, fmt.Errorf("%w: order %s of %q", ErrOrderNotFound, id, sku)
	case err != nil:
		return OrderState{}, unreachable("read queued order "+id+" of", sku, err)
	}
	st := OrderState{Order: d.Order}
	if d.Refused != nil {
		st.Err = d.Refused.err(d.Order)
	}
	return st, nil
}

// soldOrder returns order id of sku as the ledger has it, ok false when
// the ledger has no such order of sku.
func (s *Store) soldOrder(ctx context.Context, sku, id string) (OrderState, bool, error) {
	o, err := s.order(ctx, sku, id)
	switch {
	case err == nil && o.SKU == sku:
		return OrderState{Order: o, Sold: true, Sale: o.Sale()}, true, nil
	case err != nil && !errors.Is(err, inventory.ErrNotFound):
		return OrderState{}, false, err
	}
	return OrderState{}, false, nil
}

// err is the error a refusal a stands for, of order o.
func (a queuedAnswer) err(o inventory.Order) error {
	switch a.Code {
	case "sold_out":
		return &itemSoldOut{SoldOutError: &inventory.SoldOutError{SKU: o.SKU, Stock: a.Stock, Qty: o.Qty}, split: a.Split}
	case "abandoned":
		return abandoned("queued decrement", o)
	case "not_found":
		return fmt.Errorf("%w: queued decrement %q", inventory.ErrNotFound, o.SKU)
	}
	return fmt.Errorf("%w: queued decrement %q: answer %q", inventory.ErrOutcomeUnknown, o.SKU, a.Code)
}

// recordRefusal writes refusal a of f's order into its document (creating
// it if there is none: an order waited for, or accepted and not yet
// written), and reports whether it is durable: only then may it be
// answered and the message acknowledged. It runs on a context of its
// own: a refusal is recorded before the ack whatever the consumer's.
func (q *Queued) recordRefusal(f fetched, a queuedAnswer) bool {
	s := q.store
	ctx, cancel := s.commitContext(context.Background())
	defer cancel()
	o := f.order
	_, err := s.queuedOrders().ReplaceOne(ctx, bson.D{{Key: "_id", Value: o.ID}}, queuedOrder{Order: o, Refused: &a},
		options.Replace().SetUpsert(true))
	if err != nil {
		q.logger.Warn("queued: a refusal could not be recorded; the order comes back from the log", slog.String("order_id", o.ID), slog.String("sku", o.SKU), slog.Any("error", err))
		return false
	}
	return true
}

// refusedBefore returns the refusals recorded for the orders of fs, by
// order id: a message delivered again after its refusal was recorded
// (redelivered, or handed out as new by a broker that crashed: see
// applied) is answered it again, never decided anew (a restock since
// must not sell it).
func (q *Queued) refusedBefore(ctx context.Context, fs []fetched) (map[string]queuedAnswer, error) {
	ds, err := findByIDs[queuedOrder](ctx, q.store.queuedOrders(), orderIDs(fs))
	if err != nil {
		return nil, unreachable("read the queued orders of", fs[0].order.SKU, err)
	}
	out := map[string]queuedAnswer{}
	for id, d := range ds {
		if d.Refused != nil {
			out[id] = *d.Refused
		}
	}
	return out, nil
}

// orderIDs are the order ids of fs.
func orderIDs(fs []fetched) []string {
	ids := make([]string, len(fs))
	for i, f := range fs {
		ids[i] = f.order.ID
	}
	return ids
}

// widen makes the item hold what its sku can sell before the consumer
// refuses an order for its stock, as the layers around a waiting buyer's
// strategy do (splitAware, returning): a split item is merged back (the
// stock of its buckets into the item), the units of holds expired by the
// store's clock are returned. It reports whether it changed anything:
// then read the item again.
func (q *Queued) widen(ctx context.Context, it itemDoc) (bool, error) {
	s := q.store
	if it.Split != nil {
		_, _, err := s.mergeSplit(ctx, it.SKU, it.Split.Gen)
		return err == nil, err
	}
	if len(it.Holds) > 0 {
		n, err := s.returnHolds(ctx, it)
		return n > 0, err
	}
	return false, nil
}
