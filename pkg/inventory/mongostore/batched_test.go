package mongostore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// batchHold holds the batches of a Batched before their writes: each
// write a batch considers is reported on reached, with its members, and
// waits for a value on release.
// After free is closed, a write that nobody receives on reached goes
// ahead.
type batchHold struct {
	reached chan []inventory.Order
	release chan struct{}
	free    chan struct{}
}

// heldBatched returns a Batched on s whose batches are held, with a
// decrement of one unit of sku (stock units) sent and held before its
// write, so that the next decrements queue behind it; first is its
// outcome.
func heldBatched(t *testing.T, s *Store, sku string, stock int64) (b *Batched, h *batchHold, first <-chan outcome) {
	t.Helper()
	b = NewBatched(s, 0)
	h = holdBatches(b)
	mustPut(t, s, sku, stock)
	first = decrementAsync(t.Context(), b, inventory.Request{SKU: sku, Qty: 1})
	<-h.reached
	return b, h, first
}

func holdBatches(b *Batched) *batchHold {
	h := &batchHold{reached: make(chan []inventory.Order), release: make(chan struct{}), free: make(chan struct{})}
	b.beforeWrite = func(plan []inventory.Order) {
		select {
		case h.reached <- plan:
			<-h.release
		case <-h.free:
		}
	}
	return h
}

// queued returns the number of decrements of sku waiting for a batch.
func (b *Batched) queued(sku string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	if q := b.queues[sku]; q != nil {
		for _, c := range q.waiting {
			if c.state == callQueued {
				n++
			}
		}
	}
	return n
}

// waitQueued waits until n decrements of sku wait for a batch of b.
func waitQueued(t *testing.T, b *Batched, sku string, n int) {
	t.Helper()
	for b.queued(sku) != n {
		select {
		case <-t.Context().Done():
			t.Fatalf("%d decrements queued, want %d", b.queued(sku), n)
		case <-time.After(time.Millisecond):
		}
	}
}

// idle waits until the batched strategies among sts have no write in
// flight, the clearing of pending entries after their sales included.
func idle(sts ...inventory.Strategy) {
	for _, st := range sts {
		if b, ok := st.(*Batched); ok {
			b.idle()
		}
	}
}

type outcome struct {
	sale inventory.Sale
	err  error
}

// decrementAsync starts st.Decrement(ctx, req) and returns its outcome's
// channel.
func decrementAsync(ctx context.Context, st inventory.Strategy, req inventory.Request) <-chan outcome {
	out := make(chan outcome, 1)
	go func() {
		sale, err := st.Decrement(ctx, req)
		out <- outcome{sale, err}
	}()
	return out
}

// TestBatchedRace: two replicas' batched strategies, and then the same
// beside atomic ones, sell one sku at once in mixed quantities: never
// more than the stock, every unit accounted for in the ledger, and every
// request that found too little answered sold out.
func TestBatchedRace(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	cases := map[string][]inventory.Strategy{
		"batched":        {NewBatched(a, 0), NewBatched(b, 0)},
		"batched-atomic": {NewBatched(a, 0), NewAtomic(b), NewBatched(b, 0), NewAtomic(a)},
		"small-batches":  {NewBatched(a, 3), NewBatched(b, 2)},
	}
	for name, sts := range cases {
		t.Run(name, func(t *testing.T) {
			sku := "race-" + name
			const stock = 50
			mustPut(t, a, sku, stock)
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				sales []inventory.Sale
				units int64
				outs  int
			)
			for i := range 80 {
				st := sts[i%len(sts)]
				qty := int64(1 + i%3)
				wg.Go(func() {
					sale, err := st.Decrement(context.Background(), inventory.Request{SKU: sku, Qty: qty})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						sales = append(sales, sale)
						units += sale.Qty
					case errors.Is(err, inventory.ErrSoldOut):
						outs++
					default:
						t.Errorf("%s: %v", st.Name(), err)
					}
				})
			}
			wg.Wait()
			idle(sts...)
			it := mustGet(t, a, sku)
			if units > stock || it.Stock != stock-units {
				t.Fatalf("sold %d units in %d sales of %d, stock now %d", units, len(sales), stock, it.Stock)
			}
			if it.Stock >= 3 {
				t.Errorf("stock %d left after %d sold-out answers: some were sold out while 3 units were there", it.Stock, outs)
			}
			orders := allOrders(t, a, sku, time.Time{})
			inLedger := map[string]inventory.Order{}
			var ledgerUnits int64
			for _, o := range orders {
				inLedger[o.ID] = o
				ledgerUnits += o.Qty
			}
			for _, s := range sales {
				if _, ok := inLedger[s.OrderID]; !ok {
					t.Errorf("acknowledged order %s is not in the ledger", s.OrderID)
				}
			}
			if len(orders) != len(sales) || ledgerUnits != units || len(it.Pending) != 0 {
				t.Errorf("ledger: %d orders of %d units, %d pending; acknowledged %d sales of %d units", len(orders), ledgerUnits, len(it.Pending), len(sales), units)
			}
		})
	}
}

// TestBatchedOneWrite: the decrements that queue while a write is in
// flight go out as one write, in arrival order: the stock covers the
// first ones, the next one that does not fit is sold out, and a later,
// smaller one that fits is still sold. Each answer gives the stock left
// as if they had been sold one by one.
func TestBatchedOneWrite(t *testing.T) {
	s := testStore(t)
	b, h, first := heldBatched(t, s, "one", 6)
	qtys := []int64{2, 4, 1, 3}
	var outs []<-chan outcome
	for i, q := range qtys {
		outs = append(outs, decrementAsync(t.Context(), b, inventory.Request{SKU: "one", Qty: q}))
		waitQueued(t, b, "one", i+1)
	}
	h.release <- struct{}{}
	if o := <-first; o.err != nil || o.sale.Remaining != 5 {
		t.Fatalf("first: %+v, %v; want a sale leaving 5", o.sale, o.err)
	}
	before := mustGet(t, s, "one").Version
	if plan := <-h.reached; len(plan) != len(qtys) {
		t.Fatalf("second batch of %d, want the %d that queued", len(plan), len(qtys))
	}
	close(h.free)
	h.release <- struct{}{}
	defer b.idle()
	// 5 left: 2 (3 left), 4 sold out, 1 (2 left), 3 sold out.
	want := []int64{3, -1, 2, -1}
	for i, out := range outs {
		o := <-out
		switch {
		case want[i] < 0 && !errors.Is(o.err, inventory.ErrSoldOut):
			t.Errorf("qty %d: %+v, %v; want sold out", qtys[i], o.sale, o.err)
		case want[i] >= 0 && (o.err != nil || o.sale.Remaining != want[i]):
			t.Errorf("qty %d: %+v, %v; want a sale leaving %d", qtys[i], o.sale, o.err, want[i])
		}
	}
	it := mustGet(t, s, "one")
	if it.Stock != 2 || mustCount(t, s, "one") != 3 {
		t.Fatalf("stock %d, %d orders; want 2 and 3", it.Stock, mustCount(t, s, "one"))
	}
	// The stock write of the batch is one write; the unpend may be another.
	if it.Version-before > 2 {
		t.Errorf("version moved by %d for one batch: want one stock write", it.Version-before)
	}
}

// TestBatchedAbandonedMember: a keyed request given up by recovery while
// its batch waits to be written is refused by the batch's write, and the
// other members of the batch sell.
func TestBatchedAbandonedMember(t *testing.T) {
	a := testStore(t)
	rec := replicaStore(t, a, StoreOptions{Replica: "b", AbandonAfter: time.Millisecond})
	b, h, first := heldBatched(t, a, "ab", 10)
	ctx := t.Context()
	keyed := make(chan outcome, 1)
	go func() {
		sale, _, err := a.DecrementOnce(ctx, b, inventory.Request{SKU: "ab", Qty: 1, Key: "K"}, "")
		keyed <- outcome{sale, err}
	}()
	waitQueued(t, b, "ab", 1)
	others := []<-chan outcome{decrementAsync(ctx, b, inventory.Request{SKU: "ab", Qty: 2})}
	waitQueued(t, b, "ab", 2)
	others = append(others, decrementAsync(ctx, b, inventory.Request{SKU: "ab", Qty: 3}))
	waitQueued(t, b, "ab", 3)
	h.release <- struct{}{}
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	plan := <-h.reached // the batch of three, held before its write
	if len(plan) != 3 {
		t.Fatalf("batch of %d, want 3", len(plan))
	}
	if r, err := recoverUntil(ctx, rec, 1); err != nil || r.Abandoned != 1 {
		t.Fatalf("recovery: %+v, %v; want the keyed member given up", r, err)
	}
	h.release <- struct{}{}
	// The refused write's read answers the given-up member (keyed is
	// buffered) before the batch tries again: wait for that second write,
	// whichever comes first.
	if plan := <-h.reached; len(plan) != 2 {
		t.Fatalf("the write after the refused one tries %d members, want the 2 beside the given-up one", len(plan))
	}
	h.release <- struct{}{}
	if o := <-keyed; !errors.Is(o.err, inventory.ErrAbandoned) {
		t.Errorf("given-up member: %+v, %v; want inventory.ErrAbandoned", o.sale, o.err)
	}
	for _, out := range others {
		if o := <-out; o.err != nil {
			t.Errorf("member beside it: %v, want a sale", o.err)
		}
	}
	b.idle()
	if it := mustGet(t, a, "ab"); it.Stock != 4 || len(it.Pending) != 0 || mustCount(t, a, "ab") != 3 {
		t.Fatalf("stock %d, %d pending, %d orders: want 4, 0 and 3 (1, 2 and 3 sold)", it.Stock, len(it.Pending), mustCount(t, a, "ab"))
	}
}

// TestBatchedCancelledMember: a request whose caller gives up while it is
// queued, or while its batch waits to be written, sells nothing; the
// others in its batch sell.
func TestBatchedCancelledMember(t *testing.T) {
	s := testStore(t)
	b, h, first := heldBatched(t, s, "cx", 10)
	ctx := t.Context()

	queuedCtx, cancelQueued := context.WithCancel(ctx)
	inBatchCtx, cancelInBatch := context.WithCancel(ctx)
	gaveUpQueued := decrementAsync(queuedCtx, b, inventory.Request{SKU: "cx", Qty: 1})
	waitQueued(t, b, "cx", 1)
	gaveUpInBatch := decrementAsync(inBatchCtx, b, inventory.Request{SKU: "cx", Qty: 1})
	waitQueued(t, b, "cx", 2)
	kept := decrementAsync(ctx, b, inventory.Request{SKU: "cx", Qty: 2})
	waitQueued(t, b, "cx", 3)
	cancelQueued()
	if o := <-gaveUpQueued; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled while queued: %+v, %v; want context.Canceled at once", o.sale, o.err)
	}
	h.release <- struct{}{}
	if o := <-first; o.err != nil {
		t.Fatal(o.err)
	}
	plan := <-h.reached
	if len(plan) != 2 {
		t.Fatalf("batch of %d, want the 2 still waiting", len(plan))
	}
	cancelInBatch()
	h.release <- struct{}{}
	if o := <-gaveUpInBatch; !errors.Is(o.err, context.Canceled) {
		t.Errorf("cancelled in its batch before the write: %+v, %v; want context.Canceled", o.sale, o.err)
	}
	if o := <-kept; o.err != nil || o.sale.Remaining != 7 {
		t.Errorf("the member beside it: %+v, %v; want a sale leaving 7", o.sale, o.err)
	}
	if it := mustGet(t, s, "cx"); it.Stock != 7 || mustCount(t, s, "cx") != 2 {
		t.Fatalf("stock %d, %d orders: want 7 and 2", it.Stock, mustCount(t, s, "cx"))
	}
}

// TestBatchedKeyed: a keyed batched request sells once, whichever replica
// it is retried on and however often, including eight copies at once
// from two replicas, and replays its sale; after its replica dies between
// the stock write and the ledger, a retry gets the dead replica's sale
// and the ledger gets its order.
func TestBatchedKeyed(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ctx := t.Context()
	mustPut(t, a, "kb", 20)
	sts := map[*Store]inventory.Strategy{a: NewBatched(a, 0), b: NewBatched(b, 0)}
	stores := []*Store{a, b}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		ids   = map[string]int{}
		fresh int
	)
	for i := range 8 {
		wg.Go(func() {
			s := stores[i%2]
			sale, replayed, err := s.DecrementOnce(context.Background(), sts[s], inventory.Request{SKU: "kb", Qty: 2, Key: "same"}, "")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ids[sale.OrderID]++
				if !replayed {
					fresh++
				}
			case !errors.Is(err, inventory.ErrInProgress):
				t.Errorf("copy %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if len(ids) != 1 || fresh != 1 {
		t.Fatalf("order ids %v, %d fresh sales: want one order, sold once", ids, fresh)
	}
	again, replayed, err := b.DecrementOnce(ctx, sts[b], inventory.Request{SKU: "kb", Qty: 2, Key: "same"}, "")
	if _, ok := ids[again.OrderID]; err != nil || !replayed || !ok {
		t.Fatalf("retry: %+v, replayed %v, %v; want the one sale replayed", again, replayed, err)
	}
	if it := mustGet(t, a, "kb"); it.Stock != 18 || mustCount(t, a, "kb") != 1 {
		t.Fatalf("stock %d, %d orders: want 18 and 1", it.Stock, mustCount(t, a, "kb"))
	}

	idle(sts[a], sts[b])
	req := inventory.Request{SKU: "kb", Qty: 1, Key: "crash"}
	dieInside(t, a, func(dying *Store) {
		_, _, _ = dying.DecrementOnce(context.Background(), NewBatched(dying, 0), req, "")
	})
	if it := mustGet(t, a, "kb"); it.Stock != 17 || len(it.Pending) != 1 {
		t.Fatalf("after the crash: stock %d, %d pending; want 17 and the dead replica's order pending", it.Stock, len(it.Pending))
	}
	sale, replayed, err := b.DecrementOnce(ctx, sts[b], req, "")
	if err != nil || !replayed || sale.Replica != "dying" {
		t.Fatalf("retry after the crash: %+v, replayed %v, %v; want the dead replica's sale", sale, replayed, err)
	}
	if it := mustGet(t, a, "kb"); it.Stock != 17 || len(it.Pending) != 0 || mustCount(t, a, "kb") != 2 {
		t.Fatalf("stock %d, %d pending, %d orders: want 17, 0 and 2", it.Stock, len(it.Pending), mustCount(t, a, "kb"))
	}
}
