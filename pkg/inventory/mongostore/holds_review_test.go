package mongostore

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// TestHeldAfterRedisLoad: a hold taken after redis-stock loaded the sku's
// stock into Redis leaves Redis's copy a unit too high. Redis admits the
// sale of the held unit, and the item refuses it: no sale takes it, and
// the units add up at every step.
func TestHeldAfterRedisLoad(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	rs := redisStockOn(t, s, testRedis(t), RedisStockOptions{})
	const sku = "held-after-load"
	mustPut(t, s, sku, 3)
	if _, err := rs.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
		t.Fatal(err) // loads Redis with 3, sells 1: Redis holds 2
	}
	if _, err := NewAtomic(s).Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if st, err := rs.State(ctx, sku); err != nil || st.Stock != 2 {
		t.Fatalf("Redis holds %d (%v); want the copy of 2 loaded before the hold", st.Stock, err)
	}
	checkUnits(t, s, sku, 3)
	if _, err := rs.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("redis-stock sold the held unit: %v", err)
	}
	if stock, held, sold := checkUnits(t, s, sku, 3); stock != 0 || held != 1 || sold != 2 {
		t.Fatalf("available %d held %d sold %d; want 0 1 2", stock, held, sold)
	}
}

// TestHeldOnSplitItem: units held before the buckets strategy splits an
// item stay out of its buckets, its merge and its sales, and an expired
// hold's units, returned to the split item's own stock, are sold once.
func TestHeldOnSplitItem(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	b, err := NewBuckets(s, 2)
	if err != nil {
		t.Fatal(err)
	}
	const sku = "held-split"
	mustPut(t, s, sku, 8)
	live, err := NewAtomic(s).Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	pastHold(t, s, sku, 1)
	checkUnits(t, s, sku, 8)
	// 6 in stock: the first sale splits them across 2 buckets.
	if _, err := b.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
		t.Fatal(err)
	}
	if doc, err := s.getDoc(ctx, s.items, sku); err != nil || doc.Split == nil {
		t.Fatalf("not split (%v): the test needs a split item", err)
	}
	// The expired hold's unit goes back to the split item's own stock.
	if n, err := s.ReturnExpiredHolds(ctx, sku); err != nil || n != 1 {
		t.Fatalf("returned %d (%v); want the past hold's 1", n, err)
	}
	checkUnits(t, s, sku, 8)
	for range 6 {
		if _, err := b.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
			t.Fatal(err)
		}
		checkUnits(t, s, sku, 8)
	}
	if _, err := b.Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("buckets sold the live hold's unit: %v", err)
	}
	if stock, held, sold := checkUnits(t, s, sku, 8); stock != 0 || held != 1 || sold != 7 {
		t.Fatalf("available %d held %d sold %d; want 0 1 7", stock, held, sold)
	}
	if got, err := s.GetHold(ctx, sku, live.ID); err != nil || got.State != inventory.HoldHeld {
		t.Fatalf("live hold: %v %v", got.State, err)
	}
}

// TestLateConfirmReadsExpired: once a confirm is refused because its
// stamp came at or after the expiry, the hold reads expired, and its unit
// sells.
func TestLateConfirmReadsExpired(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	const sku = "late-read"
	mustPut(t, s, sku, 1)
	hold, err := NewAtomic(s).Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s.beforeStamp = func() {
		s.beforeStamp = nil
		if _, err := s.items.UpdateOne(ctx, bson.D{{Key: "_id", Value: sku}},
			bson.D{{Key: "$set", Value: bson.D{{Key: holdPath(hold.ID, "expires"), Value: hold.Created.Add(-time.Second)}}}}); err != nil {
			t.Error(err)
		}
	}
	if _, _, err := s.ConfirmHold(ctx, sku, hold.ID, ""); !errors.Is(err, inventory.ErrHoldExpired) {
		t.Fatalf("confirm stamped after the expiry: %v; want ErrHoldExpired", err)
	}
	if got, err := s.GetHold(ctx, sku, hold.ID); err != nil || got.State != inventory.HoldExpired {
		t.Fatalf("after its late confirm the hold reads %s (%v); want expired", got.State, err)
	}
	if _, err := NewAtomic(s).Decrement(ctx, inventory.Request{SKU: sku, Qty: 1}); err != nil {
		t.Fatalf("the unit of the hold confirmed late: %v", err)
	}
	checkUnits(t, s, sku, 1)
}

// TestConfirmRefusalStands: a confirm whose first write was stamped in
// time may still sell after the expiry, with its second write, as long as
// no sale returned the hold first (a pause between its two writes). A
// second confirm of the same hold (the client's retry of that request,
// sent to another replica) that read the hold before that second write
// and judged it expired by the store's clock must not answer
// hold_expired, "nothing was sold", once the first has sold: it answers
// the order, or it makes its refusal true by returning the units first.
func TestConfirmRefusalStands(t *testing.T) {
	first := testStore(t)
	retry := replicaStore(t, first, StoreOptions{Replica: "retry"})
	ctx := t.Context()
	const sku = "refusal"
	mustPut(t, first, sku, 1)
	hold, err := NewAtomic(first).Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stamped, resume, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	first.betweenConfirmWrites = func() {
		first.betweenConfirmWrites = nil
		// The pause between the two writes: the hold expires meanwhile
		// (its expiry moved to before now, as a minute would have done).
		if _, err := first.items.UpdateOne(ctx, bson.D{{Key: "_id", Value: sku}},
			bson.D{{Key: "$set", Value: bson.D{{Key: holdPath(hold.ID, "expires"), Value: hold.Created.Add(-time.Second)}}}}); err != nil {
			t.Error(err)
		}
		close(stamped)
		<-resume
	}
	go func() {
		_, _, err := first.ConfirmHold(ctx, sku, hold.ID, "")
		done <- err
	}()
	select {
	case <-stamped:
	case err := <-done:
		t.Fatalf("the first confirm ended before its second write: %v", err)
	}
	var firstErr error
	retry.afterConfirmRead = func() {
		retry.afterConfirmRead = nil
		// The first confirm's second write lands after the retry read the
		// hold, still held, and before the retry decides.
		close(resume)
		firstErr = <-done
	}
	sale, replayed, err := retry.ConfirmHold(ctx, sku, hold.ID, "")
	if firstErr != nil {
		t.Fatalf("the first confirm, stamped in time, with no sale in between: %v", firstErr)
	}
	if _, _, sold := checkUnits(t, first, sku, 1); sold != 1 {
		t.Fatalf("sold %d; want the first confirm's 1", sold)
	}
	if err != nil {
		t.Fatalf("the retry answered %v while the hold's units are sold to its order; want that order", err)
	}
	if sale.OrderID != hold.ID || !replayed {
		t.Fatalf("the retry answered order %s, replayed %v; want the hold's order %s, replayed", sale.OrderID, replayed, hold.ID)
	}
}

// TestExpiredReadStands: a hold read as expired can never be confirmed
// afterwards. A confirm stamped in time whose second write is still to
// come (paused past the expiry) may yet sell the hold, so a read in
// between must not call it expired.
func TestExpiredReadStands(t *testing.T) {
	first := testStore(t)
	reader := replicaStore(t, first, StoreOptions{Replica: "reader"})
	ctx := t.Context()
	const sku = "expired-read"
	mustPut(t, first, sku, 1)
	hold, err := NewAtomic(first).Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var read inventory.Hold
	first.betweenConfirmWrites = func() {
		first.betweenConfirmWrites = nil
		if _, err := first.items.UpdateOne(ctx, bson.D{{Key: "_id", Value: sku}},
			bson.D{{Key: "$set", Value: bson.D{{Key: holdPath(hold.ID, "expires"), Value: hold.Created.Add(-time.Second)}}}}); err != nil {
			t.Error(err)
		}
		if read, err = reader.GetHold(ctx, sku, hold.ID); err != nil {
			t.Error(err)
		}
	}
	if _, _, err := first.ConfirmHold(ctx, sku, hold.ID, ""); err != nil {
		t.Fatalf("the confirm, stamped in time, with no sale in between: %v", err)
	}
	if read.State == inventory.HoldExpired {
		t.Fatalf("the hold read as %s between the two writes of a confirm stamped in time, which then sold it", read.State)
	}
	if got, err := reader.GetHold(ctx, sku, hold.ID); err != nil || got.State != inventory.HoldConfirmed {
		t.Fatalf("after the confirm: %v %v; want confirmed", got.State, err)
	}
}

// TestHoldOnSplitItem: a hold on a sku whose stock the buckets strategy
// split across its buckets must not answer sold_out while the buckets hold
// the units: a hold takes from the item's own stock only, so the answer is
// ErrHoldsUnsupported, saying so (or a hold).
func TestHoldOnSplitItem(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	locks := newLockServices(t)
	const sku = "split-hold"
	if _, err := s.PutSplit(ctx, sku, 100, 4); err != nil {
		t.Fatal(err)
	}
	for _, h := range holders(t, s, locks) {
		_, err := h.Hold(ctx, inventory.HoldRequest{SKU: sku, Qty: 1, TTL: time.Minute})
		if errors.Is(err, inventory.ErrSoldOut) || (err != nil && !errors.Is(err, inventory.ErrHoldsUnsupported)) {
			t.Fatalf("%s: a hold of 1 on a sku whose 100 units are split across buckets: %v; want a hold or ErrHoldsUnsupported", h.Name(), err)
		}
	}
	checkUnits(t, s, sku, 100)
}
