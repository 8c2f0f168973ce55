package mongostore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/inventory"
)

// awaitOrder polls order id of sku until it is decided, and a sale is in
// the ledger; a generous bound makes an order never decided a failure.
func awaitOrder(t *testing.T, s *Store, sku, id string) OrderState {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		st, err := s.OrderState(ctx, sku, id)
		if err != nil && ctx.Err() != nil {
			t.Fatalf("order %s still queued: %v", id, ctx.Err())
		}
		if err != nil {
			t.Fatalf("OrderState(%s): %v", id, err)
		}
		if !st.Queued() && st.Sale.LedgerErr == nil {
			return st
		}
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			t.Fatalf("order %s still queued: %v", id, err)
		}
	}
}

// runningQueued returns a store and queued on it, whose consumers run
// until the test ends.
func runningQueued(t *testing.T) (*Store, *Queued) {
	t.Helper()
	s := testStore(t)
	q := testQueued(t, s, devstoretest.NATS(t).URL, localLocker(t), QueuedOptions{})
	q.runFor(t)
	return s, q
}

// mustAccept is DecrementAsync that fails the test unless the order is
// accepted (queued) or, replayed, answered.
func mustAccept(t *testing.T, q *Queued, req inventory.Request) (OrderState, bool) {
	t.Helper()
	st, replayed, err := q.DecrementAsync(t.Context(), req, "queued")
	if err != nil || st.Order.ID == "" {
		t.Fatalf("DecrementAsync(%+v): %+v, %v", req, st, err)
	}
	return st, replayed
}

// TestQueuedAsyncPolled: an order accepted without waiting is polled to
// its sale, which is the ledger's order; one the stock cannot cover is
// polled to sold out, with the stock the consumer found, and nothing in
// the ledger; an id no order has is not found.
func TestQueuedAsyncPolled(t *testing.T) {
	s, q := runningQueued(t)
	const sku = "qa-polled"
	mustPut(t, s, sku, 3)

	st, _ := mustAccept(t, q, inventory.Request{SKU: sku, Qty: 2})
	if !st.Queued() || st.Order.Qty != 2 || st.Order.Strategy != QueuedName {
		t.Fatalf("accepted: %+v; want queued, qty 2", st)
	}
	got := awaitOrder(t, s, sku, st.Order.ID)
	o, err := s.order(t.Context(), sku, st.Order.ID)
	if !got.Sold || err != nil || got.Sale.OrderID != o.ID || got.Sale.Qty != 2 || got.Sale.Remaining != 1 || o.Remaining == nil || *o.Remaining != 1 {
		t.Fatalf("polled %+v; ledger %+v (%v); want sold, qty 2, remaining 1, as the ledger has it", got, o, err)
	}

	st, _ = mustAccept(t, q, inventory.Request{SKU: sku, Qty: 2})
	got = awaitOrder(t, s, sku, st.Order.ID)
	var so *inventory.SoldOutError
	if !errors.As(got.Err, &so) || so.Stock != 1 || so.Qty != 2 {
		t.Fatalf("polled %+v; want sold out with stock 1, qty 2", got)
	}
	if n := mustCount(t, s, sku); n != 1 {
		t.Fatalf("%d orders in the ledger; want 1", n)
	}
	if _, err := s.OrderState(t.Context(), sku, newOrderID()); !errors.Is(err, ErrOrderNotFound) {
		t.Fatalf("an unknown order id: %v; want ErrOrderNotFound", err)
	}
}

// TestQueuedAsyncKeyed: a keyed request accepted without waiting, sent
// again with its key, answers the same order, queued or sold, and the
// ledger has one sale; a keyed order refused is answered its refusal
// again, never sold by the retry.
func TestQueuedAsyncKeyed(t *testing.T) {
	s, q := runningQueued(t)
	const sku = "qa-keyed"
	mustPut(t, s, sku, 5)

	req := inventory.Request{SKU: sku, Qty: 2, Key: "k-sold"}
	first, replayed := mustAccept(t, q, req)
	if replayed {
		t.Fatal("the first request answered replayed")
	}
	again, replayed := mustAccept(t, q, req)
	if !replayed || again.Order.ID != first.Order.ID {
		t.Fatalf("the retry: %+v (replayed %v); want order %s, replayed", again, replayed, first.Order.ID)
	}
	awaitOrder(t, s, sku, first.Order.ID)
	last, replayed := mustAccept(t, q, req)
	if !replayed || !last.Sold || last.Sale.OrderID != first.Order.ID {
		t.Fatalf("the retry after the sale: %+v (replayed %v); want its sale", last, replayed)
	}

	short := inventory.Request{SKU: sku, Qty: 4, Key: "k-short"}
	first, _ = mustAccept(t, q, short)
	awaitOrder(t, s, sku, first.Order.ID)
	if _, _, err := s.Restock(t.Context(), sku, "more", 10); err != nil {
		t.Fatal(err)
	}
	st, replayed, err := q.DecrementAsync(t.Context(), short, "queued")
	if !replayed || err != nil || !errors.Is(st.Err, inventory.ErrSoldOut) || st.Order.ID != first.Order.ID {
		t.Fatalf("the retry of a refused order after a restock: %+v (replayed %v), %v; want its sold out", st, replayed, err)
	}
	if n := mustCount(t, s, sku); n != 1 {
		t.Fatalf("%d orders in the ledger; want 1", n)
	}
	if it := mustSnapshot(t, s, sku); it.Stock != 13 {
		t.Fatalf("stock %d; want 13", it.Stock)
	}
}

// TestQueuedRefusalSurvivesRedelivery: a consumer records a refusal,
// answers it, and stops before its ack (a crash); the stock is restocked
// meanwhile. The log hands the order out again, and the next consumer
// answers the refusal again instead of selling it: the buyer told sold
// out, waiting or polling, was told the truth, and the ledger has no sale.
func TestQueuedRefusalSurvivesRedelivery(t *testing.T) {
	for _, wait := range []bool{true, false} {
		t.Run(map[bool]string{true: "waited", false: "polled"}[wait], func(t *testing.T) {
			s := testStore(t)
			q := testQueued(t, s, devstoretest.NATS(t).URL, localLocker(t), QueuedOptions{AckWait: time.Second})
			const sku = "qa-redelivered"
			answers := 0
			redelivered := make(chan queuedAnswer, 1)
			q.beforeAck = func(o inventory.Order, a queuedAnswer) bool {
				answers++
				if answers == 1 {
					// Polled now, the order is sold out; then the stock comes.
					if st, err := s.OrderState(t.Context(), sku, o.ID); !errors.Is(st.Err, inventory.ErrSoldOut) {
						t.Errorf("polled before the crash: %+v, %v; want sold out", st, err)
					}
					if _, _, err := s.Restock(t.Context(), sku, "restock", 5); err != nil {
						t.Error(err)
					}
					return false
				}
				redelivered <- a
				return true
			}
			q.runFor(t)
			mustPut(t, s, sku, 1)
			req := inventory.Request{SKU: sku, Qty: 2}
			var id string
			if wait {
				if sale, err := q.Decrement(t.Context(), req); !errors.Is(err, inventory.ErrSoldOut) {
					t.Fatalf("the waiting buyer: %+v, %v; want sold out", sale, err)
				}
			} else {
				st, _ := mustAccept(t, q, req)
				id = st.Order.ID
			}
			if a := <-redelivered; a.Code != "sold_out" {
				t.Fatalf("the redelivered order was answered %+v; want its sold out again", a)
			}
			if !wait {
				if got := awaitOrder(t, s, sku, id); !errors.Is(got.Err, inventory.ErrSoldOut) {
					t.Fatalf("polled after the redelivery: %+v; want sold out", got)
				}
			}
			if n := mustCount(t, s, sku); n != 0 {
				t.Fatalf("%d orders in the ledger; want none", n)
			}
			if it := mustSnapshot(t, s, sku); it.Stock != 6 {
				t.Fatalf("stock %d; want 6", it.Stock)
			}
		})
	}
}

// TestQueuedAsyncSplitItem: an order of an item the buckets strategy
// split, whose own stock is short while its buckets hold plenty, is sold:
// the consumer merges the split back before it refuses anything.
func TestQueuedAsyncSplitItem(t *testing.T) {
	s, q := runningQueued(t)
	const sku = "qa-split"
	if _, err := s.PutSplit(t.Context(), sku, 40, 4); err != nil {
		t.Fatal(err)
	}
	st, _ := mustAccept(t, q, inventory.Request{SKU: sku, Qty: 3})
	if got := awaitOrder(t, s, sku, st.Order.ID); !got.Sold {
		t.Fatalf("polled %+v; want sold", got)
	}
	if _, _, sold := checkUnits(t, s, sku, 40); sold != 3 {
		t.Fatalf("sold %d; want 3", sold)
	}
}
