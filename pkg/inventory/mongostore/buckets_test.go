package mongostore

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func newBuckets(t *testing.T, s *Store, k int) *Buckets {
	t.Helper()
	b, err := NewBuckets(s, k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustSnapshot(t *testing.T, s *Store, sku string) inventory.Item {
	t.Helper()
	it, err := s.Snapshot(t.Context(), sku)
	if err != nil {
		t.Fatalf("Snapshot(%q): %v", sku, err)
	}
	return it
}

// sellEach sends one decrement of qty per strategy in sts, all at once, and
// returns the sales and the errors.
func sellEach(sts []inventory.Strategy, sku string, qty int64) ([]inventory.Sale, []error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		sales []inventory.Sale
		errs  []error
	)
	for _, st := range sts {
		wg.Go(func() {
			sale, err := st.Decrement(context.Background(), inventory.Request{SKU: sku, Qty: qty})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			sales = append(sales, sale)
		})
	}
	wg.Wait()
	return sales, errs
}

// alternate returns n strategies taking turns from sts.
func alternate(n int, sts ...inventory.Strategy) []inventory.Strategy {
	out := make([]inventory.Strategy, n)
	for i := range out {
		out[i] = sts[i%len(sts)]
	}
	return out
}

// TestBucketsTwoStoresSellExactly races two replicas' buckets strategies
// on one sku, with as many one-unit requests as units: every request must
// sell (a sold out would be false: the units were there), and the stock,
// the sales and the ledger agree. Then one more request finds it sold out.
// The replicas are configured with different bucket counts: the item
// keeps the count of whichever split it first.
func TestBucketsTwoStoresSellExactly(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ba, bb := newBuckets(t, a, 4), newBuckets(t, b, 8)
	const sku, stock = "bk-race", 48
	mustPut(t, a, sku, stock)
	sts := alternate(stock, ba, bb)
	sales, errs := sellEach(sts, sku, 1)
	for _, err := range errs {
		t.Errorf("a request for one of the %d units left: %v", stock, err)
	}
	checkBooks(t, a, sku, stock, sales)
	_, err := bb.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1})
	var so *inventory.SoldOutError
	if !errors.As(err, &so) || so.Stock != 0 {
		t.Fatalf("a request past the stock: %v, want sold out with stock 0", err)
	}
}

// TestBucketsNoFalseSoldOut drains a sku with requests larger than any one
// bucket holds, and with requests that together leave units in several
// buckets: every request the total covers must sell.
func TestBucketsNoFalseSoldOut(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ba, bb := newBuckets(t, a, 8), newBuckets(t, b, 8)

	// 40 units in 8 buckets of 5; 13 requests of 3 units = 39, at once.
	const sku, stock = "bk-drain", 40
	mustPut(t, a, sku, stock)
	sts := alternate(13, ba, bb)
	sales, errs := sellEach(sts, sku, 3)
	for _, err := range errs {
		t.Errorf("a 3-unit request while the buckets held at least 3: %v", err)
	}
	checkBooks(t, a, sku, stock, sales)
	_, err := ba.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 3})
	var so *inventory.SoldOutError
	if !errors.As(err, &so) || so.Stock != 1 {
		t.Fatalf("3 units of the 1 left: %v, want sold out with stock 1", err)
	}

	// 7 units, more than any bucket's 5, from a sku just split.
	const big = "bk-big"
	mustPut(t, a, big, stock)
	one, err := ba.Decrement(t.Context(), inventory.Request{SKU: big, Qty: 1})
	if err != nil {
		t.Fatal(err)
	}
	seven, err := bb.Decrement(t.Context(), inventory.Request{SKU: big, Qty: 7})
	if err != nil {
		t.Fatalf("7 units of 39 split over 8 buckets: %v", err)
	}
	checkBooks(t, a, big, stock, []inventory.Sale{one, seven})
}

// TestBucketsPutDuringSales: a PUT of a split sku ends every sale of the
// old stock, including those of a replica whose split generation is
// cached (it writes without reading the item first); and a PUT racing
// sales leaves the stock it set, less only the sales that may come after
// it.
func TestBucketsPutDuringSales(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ba := newBuckets(t, a, 4)
	const sku = "bk-put"
	mustPut(t, a, sku, 40)
	if _, err := ba.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1}); err != nil {
		t.Fatal(err) // a now caches the split
	}
	mustPut(t, b, sku, 10)
	if it := mustSnapshot(t, a, sku); it.Stock != 10 {
		t.Fatalf("stock after PUT 10: %d", it.Stock)
	}
	for range 3 {
		if _, err := ba.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if it := mustSnapshot(t, a, sku); it.Stock != 7 {
		t.Fatalf("stock after PUT 10 and 3 sales: %d, want 7: a sale took from the stock the PUT replaced", it.Stock)
	}

	// PUT 30 while 40 one-unit requests run against it from two replicas.
	bb := newBuckets(t, b, 4)
	sts := alternate(40, ba, bb)
	putDone := make(chan time.Time, 1)
	go func() {
		time.Sleep(5 * time.Millisecond)
		mustPut(t, b, sku, 30)
		putDone <- time.Now()
	}()
	sales, _ := sellEach(sts, sku, 1)
	<-putDone
	it := mustSnapshot(t, a, sku)
	orders := mustCount(t, a, sku)
	if orders != int64(1+3+len(sales)) {
		t.Errorf("ledger has %d orders, %d sales acknowledged", orders, 1+3+len(sales))
	}
	if it.Stock < 0 || it.Stock > 30 || 30-it.Stock > int64(len(sales)) {
		t.Errorf("stock %d after PUT 30 and %d sales around it: want 30 less at most the sales", it.Stock, len(sales))
	}
	if len(it.Pending) != 0 {
		t.Errorf("%d orders still pending", len(it.Pending))
	}
}

// keyedPair returns two replicas' stores on one database, b giving up
// attempts after a millisecond, their buckets strategies, and a sku of
// 20 units.
func keyedPair(t *testing.T, sku string) (a, b *Store, ba, bb *Buckets) {
	t.Helper()
	a = testStore(t)
	b = replicaStore(t, a, StoreOptions{Replica: "b", AbandonAfter: time.Millisecond})
	mustPut(t, a, sku, 20)
	return a, b, newBuckets(t, a, 4), newBuckets(t, b, 4)
}

// pauseKeyed starts DecrementOnce of req on s, held just before st's
// Decrement, and returns once it is held, with the function that lets it
// go on and returns its sale and error.
func pauseKeyed(s *Store, st inventory.Strategy, req inventory.Request) func() (inventory.Sale, error) {
	h := hold(st)
	type result struct {
		sale inventory.Sale
		err  error
	}
	done := make(chan result, 1)
	go func() {
		sale, _, err := s.DecrementOnce(context.Background(), h, req, "")
		done <- result{sale, err}
	}()
	<-h.reached
	return func() (inventory.Sale, error) {
		close(h.release)
		r := <-done
		return r.sale, r.err
	}
}

// TestBucketsKeyed: DecrementOnce replays a buckets sale; and an attempt
// given up by recovery cannot sell afterwards, even from a replica that
// writes its bucket without reading the item (its split cached): the
// give-up fences every bucket, not the item alone.
func TestBucketsKeyed(t *testing.T) {
	const sku = "bk-keyed"
	a, b, ba, bb := keyedPair(t, sku)
	ctx := t.Context()

	req := inventory.Request{SKU: sku, Qty: 2, Key: "R"}
	first, replayed, err := a.DecrementOnce(ctx, ba, req, "")
	if err != nil || replayed {
		t.Fatalf("first keyed sale: %v, replayed %v", err, replayed)
	}
	again, replayed, err := b.DecrementOnce(ctx, bb, req, "")
	if err != nil || !replayed || again.OrderID != first.OrderID {
		t.Fatalf("replay on b: %+v, replayed %v, %v; want %s replayed", again, replayed, err, first.OrderID)
	}

	// a's cache holds the split now. Pause a keyed request of a before
	// its write, give it up on b, then let it write.
	req = inventory.Request{SKU: sku, Qty: 1, Key: "K"}
	release := pauseKeyed(a, ba, req)
	recoverUntilAbandoned(t, b)
	paused, pausedErr := release()
	if !errors.Is(pausedErr, inventory.ErrAbandoned) {
		t.Errorf("the given-up request: sale %+v, %v; want inventory.ErrAbandoned", paused, pausedErr)
	}
	retry, replayed, err := b.DecrementOnce(ctx, bb, req, "")
	if err != nil || replayed {
		t.Fatalf("retry of K on b: %v, replayed %v", err, replayed)
	}
	if it := mustSnapshot(t, a, sku); it.Stock != 17 {
		t.Errorf("stock = %d, want 17: 2 units under R, 1 under K", it.Stock)
	}
	if n := mustCount(t, a, sku); n != 2 {
		t.Errorf("orders = %d, want 2", n)
	}
	if pausedErr == nil && paused.OrderID != retry.OrderID {
		t.Errorf("K sold twice: %s and %s", paused.OrderID, retry.OrderID)
	}
}

// TestBucketsTakenAttemptSettles: a keyed sale that took its unit from a
// bucket, and whose replica died before recording it, is found there by
// recovery: recorded and counted as settled, never given up (which would
// free its key for a second sale).
func TestBucketsTakenAttemptSettles(t *testing.T) {
	const sku = "bk-taken"
	a := testStore(t)
	dying := replicaStore(t, a, StoreOptions{Replica: "dying", AfterTake: func(o inventory.Order) {
		if o.Key == "K" {
			runtime.Goexit() // killed between its stock write and its ledger write
		}
	}})
	mustPut(t, a, sku, 20)
	ctx := t.Context()
	ba := newBuckets(t, a, 4)
	if _, err := ba.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
		t.Fatal(err) // the first sale splits the item
	}
	req, bd := inventory.Request{SKU: sku, Qty: 1, Key: "K"}, newBuckets(t, dying, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = dying.DecrementOnce(context.Background(), bd, req, "")
	}()
	<-done
	var rec keyRecord
	if err := a.keys.FindOne(ctx, bson.D{{Key: "_id", Value: sku + "/K"}}).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	if _, _, found, err := a.pendingInBuckets(ctx, a.items, sku, rec.OrderID); err != nil || !found {
		t.Fatalf("the dead attempt's order pending in a bucket: %v, %v; want it there", found, err)
	}
	// The attempt is the dying store's own and no longer in flight: its
	// recovery settles it at once.
	r, err := dying.RecoverKeys(ctx)
	if err != nil || r.Settled != 1 || r.Abandoned != 0 {
		t.Fatalf("RecoverKeys = %+v, %v; want the attempt settled, not abandoned", r, err)
	}
	replay, replayed, err := a.DecrementOnce(ctx, ba, req, "")
	if err != nil || !replayed || replay.OrderID != rec.OrderID {
		t.Fatalf("retry of K: %+v, replayed %v, %v; want %s replayed", replay, replayed, err, rec.OrderID)
	}
	if it, n := mustSnapshot(t, a, sku), mustCount(t, a, sku); it.Stock != 18 || n != 2 {
		t.Fatalf("stock %d, orders %d; want 18 and 2", it.Stock, n)
	}
}

// TestBucketsMixedWritersOneSKU runs the buckets strategy beside every
// other safe strategy on one sku, from two replicas, with as many
// one-unit requests as units: once buckets has split the item, the others
// must sell from its buckets too, never answering sold out while units
// remain; and nothing is sold twice between them.
func TestBucketsMixedWritersOneSKU(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	locks := newLockServices(t)
	var sts []inventory.Strategy
	for _, s := range []*Store{a, b} {
		sts = append(sts, newBuckets(t, s, 4))
		for _, st := range safeStrategies(t, s, locks) {
			w, err := newSplitAware(st, s, 4)
			if err != nil {
				t.Fatal(err)
			}
			sts = append(sts, w)
		}
	}
	for run := range 2 {
		sku := "bk-mixed-" + string(rune('a'+run))
		const stock = 30
		mustPut(t, a, sku, stock)
		// Split it first, so that every other strategy meets the buckets.
		first, err := sts[0].Decrement(t.Context(), inventory.Request{SKU: sku, Qty: 1})
		if err != nil {
			t.Fatal(err)
		}
		sales, errs := sellEach(alternate(stock-1, sts...), sku, 1)
		for _, err := range errs {
			if errors.Is(err, inventory.ErrSoldOut) {
				t.Errorf("%s: sold out while units remained: %v", sku, err)
			}
		}
		checkBooks(t, a, sku, stock, append(sales, first))
	}
}

// TestBucketsGiveUpBeforeSpread: recovery gives a keyed attempt up while
// its item is not split yet (the fence is then in the item only), and a
// spread computed from a read before that give-up lands after it (the
// fence does not move the item's version). The buckets it materializes
// must refuse the attempt too, even from a replica that writes its bucket
// without reading the item.
func TestBucketsGiveUpBeforeSpread(t *testing.T) {
	const sku = "bk-spread-race"
	a, b, ba, bb := keyedPair(t, sku)
	ctx := t.Context()

	req := inventory.Request{SKU: sku, Qty: 1, Key: "K"}
	release := pauseKeyed(a, ba, req)
	before, err := a.read(ctx, a.items, sku)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := recoverUntil(ctx, b, 1); err != nil || rec.Abandoned != 1 {
		t.Fatalf("b's recovery: %+v, %v; want the paused attempt abandoned", rec, err)
	}
	if _, err := ba.spread(ctx, before); err != nil {
		t.Fatal(err)
	}
	if _, err := ba.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
		t.Fatal(err) // a caches the split
	}
	if _, err := release(); !errors.Is(err, inventory.ErrAbandoned) {
		t.Errorf("the given-up request: %v; want inventory.ErrAbandoned", err)
	}
	if _, _, err := b.DecrementOnce(ctx, bb, req, ""); err != nil {
		t.Fatalf("retry of K on b: %v", err)
	}
	if it := mustSnapshot(t, a, sku); it.Stock != 18 {
		t.Errorf("stock = %d, want 18: one unsold-key sale and K once", it.Stock)
	}
	if n := mustCount(t, a, sku); n != 2 {
		t.Errorf("orders = %d, want 2: K sold twice", n)
	}
}

// TestBucketsReadAcrossASplit holds a read between its read of the item
// and its reads of the buckets while another replica merges the sku (a
// sale larger than any bucket) and splits it again: the buckets it then
// reads belong to a split its item does not show. Counted against the
// item it read, they count nothing; the read must see that the item moved
// on, and read again.
func TestBucketsReadAcrossASplit(t *testing.T) {
	a := testStore(t)
	b := replicaStore(t, a, StoreOptions{Replica: "b"})
	ba, bb := newBuckets(t, a, 4), newBuckets(t, b, 4)
	const sku = "bk-across"
	mustPut(t, a, sku, 40)
	sell := func(st inventory.Strategy, qty int64) {
		if _, err := st.Decrement(t.Context(), inventory.Request{SKU: sku, Qty: qty}); err != nil {
			t.Errorf("sell %d: %v", qty, err)
		}
	}
	sell(ba, 1) // split into 4 buckets of 10, one of them now 9
	var once sync.Once
	a.afterItemRead = func() {
		once.Do(func() {
			sell(bb, 11) // more than any bucket: merge (28 left in the item)
			sell(bb, 1)  // split again, at a new generation
		})
	}
	if got := mustSnapshot(t, a, sku).Stock; got != 40-1-11-1 {
		t.Errorf("a read across a merge and a new split: stock %d, want %d", got, 40-1-11-1)
	}
}
