package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/pkg/strategy"
)

// The sold-out shortcut.
//
// In a flash sale most buyers arrive after the last unit is gone, and
// each of them costs the strategy's own sold out: atomic's conditional
// update that misses and the read that says why, a lock strategy's read
// before its lock, optimistic's read, redis-stock's take in Redis and its
// read of the item. The sold-out shortcut puts one thing in front of a strategy
// instead: after a sale of a sku answered ErrSoldOut, the sku is marked
// "probably sold out" on this replica, and while it is marked a sale
// reads what is sellable instead of deciding itself. Reads are coalesced
// per sku: a sale joins the next read, which is sent only after it joined
// (never one already in flight, which may have read the store before the
// sale began), so the read lies inside every joiner's interval and one
// read answers all of them. A joiner for whom the read shows enough units
// drops the mark and goes on to the strategy's Decrement, which decides
// as it always did; one for whom it shows too few answers ErrSoldOut,
// justified by the store's state at that read.
//
// The mark decides only which comes first, the read or the strategy: a
// stale mark costs one read, never a false sold out. A PUT, a restock, a
// released or expired hold on any replica is seen by the next read,
// because every sold out the shortcut answers comes from a read sent
// after the sale arrived.

// Paths of a sold out, for SoldOutObserver.
const (
	// SoldOutByRead: answered by the shortcut's coalesced read, with no
	// write and no lock.
	SoldOutByRead = "read"
	// SoldOutByStrategy: answered by the strategy's own Decrement (for
	// atomic and batched a conditional update, for a lock strategy its
	// read before the lock, ...); it marks the sku.
	SoldOutByStrategy = "strategy"
)

// SoldOutObserver is told what the sold-out shortcut does, for metrics
// (the service turns it into stock_sold_out_total and
// stock_sold_out_reads_total). Its methods must be cheap and safe for
// concurrent use.
type SoldOutObserver interface {
	// SoldOutAnswered reports one sale answered ErrSoldOut, and by which
	// path: SoldOutByRead or SoldOutByStrategy.
	SoldOutAnswered(strategy, path string)
	// SoldOutRead reports one read of the shortcut and how many sales
	// waited on it.
	SoldOutRead(strategy string, sales int)
}

type nopSoldOutObserver struct{}

func (nopSoldOutObserver) SoldOutAnswered(string, string) {}
func (nopSoldOutObserver) SoldOutRead(string, int)        {}

// maxSoldOutMarks bounds the skus one shortcut remembers as sold out: past
// it a sku is not marked, and its sales go to the strategy as before.
const maxSoldOutMarks = 1 << 16

// newSoldOutShortcut returns st with the sold-out shortcut in front of it
// (see above), reading what is sellable as sellableOf says; a strategy it
// cannot read for is returned as it is. A nil obs means none.
//
// Build puts it in front of the split-aware layer: a sold out it answers
// is then the whole sku's, buckets included.
func newSoldOutShortcut(st inventory.Strategy, s *Store, obs SoldOutObserver) inventory.Strategy {
	read := sellableOf(st, s)
	if read == nil {
		return st
	}
	if obs == nil {
		obs = nopSoldOutObserver{}
	}
	return &soldOutShortcut{Strategy: st, store: s, read: read, obs: obs, skus: map[string]*soldOutSKU{}}
}

// sellableOf returns how the shortcut reads what st could sell: st's
// Sellable when st is an inventory.SellableReader, sellable for a safe
// strategy this package builds (Build's other layers included), and nil
// for any other strategy, and an unsafe one (see
// inventory.SellableReader).
func sellableOf(st inventory.Strategy, s *Store) func(context.Context, string) (int64, error) {
	if r, ok := st.(inventory.SellableReader); ok {
		return r.Sellable
	}
	in, ok := strategy.Lookup(st.Name())
	if !ok || !in.Safe {
		return nil
	}
	switch unwrap(st).(type) {
	case *Atomic, *Locked, *Optimistic, *Batched, *Buckets:
	case *RedisStock:
		// The item is redis-stock's truth, not Redis: a batch lands only
		// on an item whose stock covers it, and a sold out from Redis
		// stands only once the item says so (checkSoldOut), so an item
		// short of qty is a sold out whatever Redis holds, and one that
		// covers it goes to the strategy, which reloads Redis if needed.
	default:
		return nil
	}
	return s.sellable
}

// sellable is what a sale of sku can take now, as a GET shows it: the
// item's stock and its buckets' (Snapshot), with the units of holds
// expired by a lower estimate of the store's clock, which every strategy
// Build makes sells: a Holder in its own update, another once returning
// has returned them.
func (s *Store) sellable(ctx context.Context, sku string) (int64, error) {
	it, err := s.snapshot(ctx, sku)
	if err != nil {
		return 0, err
	}
	return it.Stock + s.expiredUnits(ctx, it), nil
}

// soldOutShortcut is newSoldOutShortcut's strategy.
type soldOutShortcut struct {
	inventory.Strategy
	store *Store
	read  func(context.Context, string) (int64, error)
	obs   SoldOutObserver

	mu   sync.Mutex
	skus map[string]*soldOutSKU // guarded by mu

	// afterRead, when set (by tests), runs after each read returns and
	// before its sales hear of it.
	afterRead func(sku string)
}

// soldOutSKU is what the shortcut knows of one sku. It leaves the map
// once it is neither marked nor read.
type soldOutSKU struct {
	marked  bool
	reading bool          // a read of the sku is in flight
	next    *sellableRead // the read that sales arriving now join; sent once the one in flight returns
}

// sellableRead is one coalesced read: its result is set before done is
// closed.
type sellableRead struct {
	done  chan struct{}
	sales int // the sales that joined it; guarded by mu until it is sent
	units int64
	err   error
}

// Decrement implements inventory.Strategy. A request with an order id is
// a keyed one whose key is reserved (Store.DecrementOnce asked the
// shortcut before, see soldOutFirst): it goes to the strategy, which says
// whether its attempt was given up (ErrAbandoned) before it says sold out.
func (w *soldOutShortcut) Decrement(ctx context.Context, req inventory.Request) (inventory.Sale, error) {
	if req.OrderID == "" {
		if err := w.readSoldOut(ctx, req); err != nil {
			if errors.Is(err, inventory.ErrSoldOut) {
				w.obs.SoldOutAnswered(w.Name(), SoldOutByRead)
			}
			return inventory.Sale{}, err
		}
	}
	sale, err := w.Strategy.Decrement(ctx, req)
	if errors.Is(err, inventory.ErrSoldOut) {
		w.mark(req.SKU)
		w.obs.SoldOutAnswered(w.Name(), SoldOutByStrategy)
	}
	return sale, err
}

// readSoldOut returns, when req's sku is marked, the ErrSoldOut that a
// coalesced read sent after the call began justifies, or the read's error;
// nil when the sku is not marked, or the read showed enough (then the mark
// is dropped): the strategy decides. Store.DecrementOnce asks it too,
// before it reserves an idempotency key.
func (w *soldOutShortcut) readSoldOut(ctx context.Context, req inventory.Request) error {
	r, send := w.join(req.SKU)
	if r == nil {
		return nil
	}
	if send {
		go w.send(context.WithoutCancel(ctx), req.SKU, r)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if r.err != nil {
		return fmt.Errorf("%s: sold-out shortcut's read of %q: %w", w.Name(), req.SKU, r.err)
	}
	if r.units < req.Qty {
		return soldOut(req.SKU, r.units, req.Qty)
	}
	w.unmark(req.SKU)
	return nil
}

// join returns the read a sale of sku waits on while sku is marked (nil
// when it is not), and whether the caller sends it: no read of sku was in
// flight.
func (w *soldOutShortcut) join(sku string) (r *sellableRead, send bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.skus[sku]
	if st == nil || !st.marked {
		return nil, false
	}
	if st.next == nil {
		st.next = &sellableRead{done: make(chan struct{})}
	}
	r = st.next
	r.sales++
	if !st.reading {
		st.reading, st.next, send = true, nil, true
	}
	return r, send
}

// send runs read r of sku, then each read that sales joined meanwhile, one
// after the other, until none did. ctx carries the first joiner's values,
// not its cancellation: the others wait on the read too. Each read is
// bounded by the store's write timeout.
func (w *soldOutShortcut) send(ctx context.Context, sku string, r *sellableRead) {
	for r != nil {
		rctx, cancel := context.WithTimeout(ctx, w.store.writeTimeout)
		units, err := w.read(rctx, sku)
		cancel()
		if w.afterRead != nil {
			w.afterRead(sku)
		}
		if err != nil && !errors.Is(err, inventory.ErrNotFound) {
			w.store.logger.WarnContext(ctx, "sold-out shortcut: read failed; its sales answer the error",
				slog.String("strategy", w.Name()), slog.String("sku", sku), slog.Any("error", err))
		}
		w.mu.Lock()
		r.units, r.err = units, err
		sales := r.sales
		close(r.done)
		st := w.skus[sku]
		r, st.next = st.next, nil
		if r == nil {
			st.reading = false
			w.forget(sku, st)
		}
		w.mu.Unlock()
		w.obs.SoldOutRead(w.Name(), sales)
	}
}

// mark marks sku probably sold out.
func (w *soldOutShortcut) mark(sku string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.skus[sku]
	if st == nil {
		if len(w.skus) >= maxSoldOutMarks {
			return
		}
		st = &soldOutSKU{}
		w.skus[sku] = st
	}
	st.marked = true
}

// unmark drops sku's mark: a read showed units for a sale.
func (w *soldOutShortcut) unmark(sku string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.skus[sku]; st != nil {
		st.marked = false
		w.forget(sku, st)
	}
}

// forget drops st, sku's entry, once it is neither marked nor read.
// Called with mu held.
func (w *soldOutShortcut) forget(sku string, st *soldOutSKU) {
	if !st.marked && !st.reading && st.next == nil {
		delete(w.skus, sku)
	}
}
