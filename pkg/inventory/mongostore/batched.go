package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DefaultMaxBatch bounds the decrements of one sku that Batched applies in
// one write.
const DefaultMaxBatch = 100

// batchAttempts bounds the writes one batch tries: each one that matches
// nothing (another writer took stock, or a member was given up) is
// followed by a read and another write of the members still undecided.
const batchAttempts = 16

// Batched takes the stock of many decrements of one sku in one conditional
// update. A replica queues the decrements of each sku; while one write of
// the sku is in flight, the next decrements wait, and as soon as it
// returns, every one that waited (up to DefaultMaxBatch, in arrival order)
// goes out as one write:
//
//	findOneAndUpdate({_id: sku, stock: {$gte: total}, aborted.<id1>: {$exists: false}, ...},
//	                 {$inc: {stock: -total, version: 1}, $set: {pending.<id1>: o1, ...}})
//
// There is no batching window: a request that finds no write of its sku in
// flight is sent at once, alone. So the wait a request adds is at most the
// write in flight when it arrived (and whole batches ahead of it, past
// DefaultMaxBatch waiting).
//
// Each member keeps its own order, with its own pending entry and its own
// aborted fence, exactly as an atomic decrement has: a member given up
// (DecrementOnce's recovery) is refused by the write's condition, and is
// dropped, after a read says why, without failing the others. A member
// whose context ends before the write that would take its stock is sent
// is dropped too; once sent, its outcome is the write's. When the whole
// batch does not fit the stock, a read tells how much there is, and the
// members are taken in arrival order as far as it goes; the rest answer
// ErrSoldOut once the write has shown that the stock, at the moment it
// took the others, could not cover them. Then the batch's orders go into
// the ledger in one insert, each member gets its own answer, and the
// sku's next stock write clears their pending entries (or one update of
// their own does, when no write of the sku follows): on a hot sku, one
// write of the item per batch.
type Batched struct {
	store    *Store
	maxBatch int

	mu     sync.Mutex
	queues map[string]*batchQueue // a sku's queue exists while its drain runs

	// background counts the drains and ledger writes running.
	background sync.WaitGroup

	// beforeWrite, when set, runs before each write a batch considers
	// sending, with its undecided members: a hook for tests that hold a
	// batch there.
	beforeWrite func([]inventory.Order)
}

// batchQueue holds the decrements of one sku waiting for the next write.
type batchQueue struct {
	waiting []*batchCall
	// stockHint is the stock last seen by the queue's drain, which alone
	// uses it; MaxInt64 until then.
	stockHint int64
	// unpend holds orders of the sku that are in the ledger and still
	// pending in the item: the next stock write clears them, or the
	// drain, when it ends.
	unpend []string
}

// A batchCall is one decrement in a queue. state is guarded by
// Batched.mu; answered is used by the goroutine running its batch alone.
type batchCall struct {
	ctx      context.Context
	order    inventory.Order
	state    callState
	answered bool             // set by answer
	handed   bool             // its stock taken: record answers it
	done     chan batchAnswer // buffered: answered exactly once
}

type callState int

const (
	callQueued    callState = iota // waiting for a batch
	callTaken                      // in a batch: its batch answers it
	callCancelled                  // its caller gave up while it was queued
)

type batchAnswer struct {
	sale inventory.Sale
	err  error
}

// answer gives c its outcome, once.
func (c *batchCall) answer(sale inventory.Sale, err error) {
	if c.answered {
		return
	}
	c.answered = true
	c.done <- batchAnswer{sale, err}
}

// NewBatched returns the batching strategy: at most maxBatch decrements
// of one sku a write (DefaultMaxBatch if maxBatch <= 0).
func NewBatched(store *Store, maxBatch int) *Batched {
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	return &Batched{store: store, maxBatch: maxBatch, queues: map[string]*batchQueue{}}
}

// Name returns strategy.Batched.
func (b *Batched) Name() string { return strategy.Batched }

// Decrement implements Strategy.
func (b *Batched) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	c := &batchCall{ctx: ctx, order: b.store.newOrder(req, strategy.Batched, 0), done: make(chan batchAnswer, 1)}
	b.mu.Lock()
	q := b.queues[req.SKU]
	if q == nil {
		q = &batchQueue{stockHint: math.MaxInt64}
		b.queues[req.SKU] = q
		b.background.Add(1)
		go b.drain(req.SKU, q)
	}
	q.waiting = append(q.waiting, c)
	b.mu.Unlock()

	select {
	case a := <-c.done:
		return a.sale, a.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if c.state == callQueued {
		c.state = callCancelled
		b.mu.Unlock()
		return inventory.Sale{}, context.Cause(ctx)
	}
	b.mu.Unlock()
	// In a batch already: it drops c if its write is not sent yet, and
	// answers c with the write's outcome otherwise.
	a := <-c.done
	return a.sale, a.err
}

// drain runs the batches of sku's queue one after the other until the
// queue is empty. The ledger writes of a batch run beside the next
// batch's stock write.
func (b *Batched) drain(sku string, q *batchQueue) {
	defer b.background.Done()
	for {
		batch, unpend := b.next(sku, q)
		if batch == nil {
			ctx, cancel := b.store.commitContext(context.Background())
			b.store.unpend(ctx, sku, unpend)
			cancel()
			return
		}
		b.take(q, batch)
	}
}

// idle waits until no drain and no ledger write of b runs.
func (b *Batched) idle() { b.background.Wait() }

// next takes the next batch off q: the queued calls in arrival order, up
// to maxBatch, skipping a call whose order id is already in the batch (a
// write cannot set one pending entry twice). With nothing queued it
// removes q, so that the next call starts a new drain, and returns the
// orders q still had to unpend.
func (b *Batched) next(sku string, q *batchQueue) (batch []*batchCall, unpend []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var (
		rest []*batchCall
		ids  = map[string]bool{}
	)
	for _, c := range q.waiting {
		switch {
		case c.state == callCancelled:
		case len(batch) < b.maxBatch && !ids[c.order.ID]:
			c.state = callTaken
			ids[c.order.ID] = true
			batch = append(batch, c)
		default:
			rest = append(rest, c)
		}
	}
	q.waiting = rest
	if len(batch) == 0 {
		delete(b.queues, sku)
		return nil, q.unpend
	}
	return batch, nil
}

// take sells what it can of batch with as few writes as it can, answers
// the members it does not sell, and hands the sold ones to record. q's
// stock hint, the stock the sku's last write left, is its first guess of
// what the members may take; a guess too high costs a write that matches
// nothing and a read, a guess too low only delays the members it leaves
// out to the next write: it never decides that one is sold out.
func (b *Batched) take(q *batchQueue, batch []*batchCall) {
	sku := batch[0].order.SKU
	defer func() {
		// A panic, or a hook that ends the goroutine: no member may be
		// left waiting. What was sent may have been applied.
		for _, c := range batch {
			if !c.handed {
				c.answer(inventory.Sale{}, fmt.Errorf("%w: batched decrement %q: the batch stopped", inventory.ErrOutcomeUnknown, sku))
			}
		}
	}()
	plan := batch // the members still undecided, in arrival order
	stock, read := q.stockHint, false
	var seen itemDoc // the item as the last read found it
	for range batchAttempts {
		if len(plan) > 0 && b.beforeWrite != nil {
			b.beforeWrite(ordersOf(plan))
		}
		if plan = b.dropCancelled(plan); len(plan) == 0 {
			return
		}
		fits, try, total := fit(plan, stock)
		switch {
		case total == 0 && read:
			// Even the first member asks more than the stock this
			// batch just read.
			for _, c := range plan {
				c.answer(inventory.Sale{}, soldOutOf(seen, c.order.Qty))
			}
			return
		case total > 0:
			b.mu.Lock()
			unpend := q.unpend
			q.unpend = nil
			b.mu.Unlock()
			// Sent whatever happens to the members' contexts: an error is
			// ErrOutcomeUnknown, or ErrStoreUnavailable if never sent.
			written, matched, err := b.store.writeOnce(try[0].ctx, sale{op: fmt.Sprintf("batched decrement of %d orders of", len(try)), sku: sku,
				orders: ordersOf(try), qty: total, unpend: unpend})
			if !matched {
				b.mu.Lock()
				q.unpend = append(q.unpend, unpend...)
				b.mu.Unlock()
			}
			if err != nil {
				for i, c := range plan {
					if fits[i] {
						c.answer(inventory.Sale{}, err)
					} else {
						c.answer(inventory.Sale{}, fmt.Errorf("%w: batched decrement %q: the write before this request's turn failed: %v", inventory.ErrStoreUnavailable, sku, err))
					}
				}
				return
			}
			if matched {
				for _, c := range try {
					c.handed = true
				}
				b.background.Add(1)
				go b.record(try, written.Stock)
				q.stockHint = written.Stock
				plan = b.afterTake(plan, fits, written.Stock+total)
				stock, read = written.Stock, false
				continue
			}
		}
		// Nothing taken, or nothing tried on a guess: read the item.
		it, err := b.store.getDoc(context.WithoutCancel(plan[0].ctx), b.store.items, sku)
		if err != nil {
			for _, c := range plan {
				c.answer(inventory.Sale{}, err)
			}
			return
		}
		var next []*batchCall
		for _, c := range plan {
			if gaveUp(it, c.order) {
				c.answer(inventory.Sale{}, abandoned("batched decrement", c.order))
				continue
			}
			next = append(next, c)
		}
		plan, stock, read, seen = next, it.Stock, true, it
		q.stockHint = it.Stock
	}
	for _, c := range plan {
		c.answer(inventory.Sale{}, fmt.Errorf("%w: batched decrement %q: the stock changed under each of %d writes", inventory.ErrConflict, sku, batchAttempts))
	}
}

// afterTake answers the members of plan that a write taking the members
// fits marks left out, and returns those still undecided. The write found
// found units (at least what it took). A member left out is sold out if
// it did not fit, after the members before it, in found; if it did (found
// had grown since the stock was read), it goes into the next write.
func (b *Batched) afterTake(plan []*batchCall, fits []bool, found int64) []*batchCall {
	left := found
	var next []*batchCall
	for i, c := range plan {
		switch {
		case fits[i]:
			left -= c.order.Qty
		case c.order.Qty > left:
			c.answer(inventory.Sale{}, soldOut(c.order.SKU, left, c.order.Qty))
		default:
			next = append(next, c)
		}
	}
	return next
}

// dropCancelled answers the members whose context has ended with its
// cause, before a write that would take their stock is sent, and returns
// the others.
func (b *Batched) dropCancelled(plan []*batchCall) []*batchCall {
	var live []*batchCall
	for _, c := range plan {
		if c.ctx.Err() != nil {
			c.answer(inventory.Sale{}, context.Cause(c.ctx))
			continue
		}
		live = append(live, c)
	}
	return live
}

func ordersOf(calls []*batchCall) []inventory.Order {
	orders := make([]inventory.Order, len(calls))
	for i, c := range calls {
		orders[i] = c.order
	}
	return orders
}

// fit marks the members that stock covers, taken in arrival order, and
// returns them and their total.
func fit(plan []*batchCall, stock int64) (fits []bool, try []*batchCall, total int64) {
	fits = make([]bool, len(plan))
	for i, c := range plan {
		if c.order.Qty <= stock-total {
			fits[i] = true
			try = append(try, c)
			total += c.order.Qty
		}
	}
	return fits, try, total
}

// record puts the orders of sold, whose stock one write took leaving
// after, into the ledger and answers each member with its sale, the
// remaining stock as if the members had been sold one by one in arrival
// order. Like Store.sold, it runs to completion whatever the members'
// contexts. The pending entries of the recorded orders are cleared after
// the answers, by the sku's next stock write or by one update of their
// own.
func (b *Batched) record(sold []*batchCall, after int64) {
	defer b.background.Done()
	s := b.store
	sku := sold[0].order.SKU
	defer func() {
		for _, c := range sold {
			c.answer(inventory.Sale{}, fmt.Errorf("%w: batched decrement %q: stopped before its order was recorded", inventory.ErrOutcomeUnknown, sku))
		}
	}()
	orders := ordersOf(sold)
	ptrs := make([]*inventory.Order, len(orders))
	for i := range orders {
		ptrs[i] = &orders[i]
	}
	remainings(ptrs, after)
	if s.afterTake != nil {
		for _, o := range orders {
			s.afterTake(o)
		}
	}
	ctx, cancel := s.commitContext(sold[0].ctx)
	defer cancel()
	sales, recorded := s.recordBatch(ctx, orders)
	for i, c := range sold {
		c.answer(sales[i], nil)
	}
	b.mu.Lock()
	if q := b.queues[sku]; q != nil {
		q.unpend = append(q.unpend, recorded...)
		recorded = nil
	}
	b.mu.Unlock()
	s.unpend(ctx, sku, recorded)
}

// recordBatch puts orders, whose stock one write took, into the ledger in
// one insert (insertOrders), and returns their sales and the ids of the
// orders recorded, whose pending entries are then cleared (unpend). An
// order that could not be recorded gets its sale with LedgerErr, logged:
// it stays pending in the item for RecoverPending.
func (s *Store) recordBatch(ctx context.Context, orders []inventory.Order) (sales []inventory.Sale, recorded []string) {
	errs := s.insertOrders(ctx, orders)
	sales = make([]inventory.Sale, len(orders))
	for i, o := range orders {
		sales[i] = o.Sale()
		if errs[i] == nil {
			recorded = append(recorded, o.ID)
			continue
		}
		sales[i].LedgerErr = fmt.Errorf("inventory: record order %s of %q: %w", o.ID, o.SKU, errs[i])
		s.logger.ErrorContext(ctx, "order not yet in the ledger: it stays pending in the item until recovery records it",
			slog.String("order_id", o.ID), slog.String("sku", o.SKU), slog.Int64("qty", o.Qty),
			slog.String("strategy", o.Strategy), slog.Any("error", errs[i]))
	}
	return sales, recorded
}

// unpend clears the pending entries of the orders ids of sku, which are
// in the ledger, in one update.
func (s *Store) unpend(ctx context.Context, sku string, ids []string) {
	if len(ids) == 0 {
		return
	}
	if _, err := s.items.UpdateOne(ctx, bson.D{{Key: "_id", Value: sku}}, bson.D{{Key: "$unset", Value: unsetPending(ids)}}); err != nil {
		// The orders are in the ledger; the stale entries only cost the
		// next recovery duplicate inserts.
		s.logger.WarnContext(ctx, "orders recorded, but their pending entries could not be cleared",
			slog.String("sku", sku), slog.Int("orders", len(ids)), slog.Any("error", err))
	}
}

// unsetPending is the $unset of the pending entries of the orders ids.
func unsetPending(ids []string) bson.D {
	unset := make(bson.D, len(ids))
	for i, id := range ids {
		unset[i] = bson.E{Key: pendingPath(id), Value: ""}
	}
	return unset
}

// insertOrders inserts the orders into the ledger in one insert. If that
// fails other than by orders already recorded, each order is inserted on
// its own (insertOrder's retries; a duplicate is recorded). errs[i] is the
// error of orders[i], nil once it is in the ledger.
func (s *Store) insertOrders(ctx context.Context, orders []inventory.Order) (errs []error) {
	errs = make([]error, len(orders))
	docs := make([]any, len(orders))
	for i, o := range orders {
		docs[i] = o
	}
	_, err := s.orders.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if err != nil && !onlyDuplicates(err) {
		for i, o := range orders {
			_, errs[i] = s.insertOrder(ctx, o)
		}
	}
	return errs
}

// onlyDuplicates reports whether err is of an insert whose every failed
// document was already there: the orders are recorded.
func onlyDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if !mongo.IsDuplicateKeyError(we.WriteError) {
			return false
		}
	}
	return true
}

var _ = addBuilder(strategy.Batched, func(d Deps) (inventory.Strategy, error) { return NewBatched(d.Store, 0), nil })
