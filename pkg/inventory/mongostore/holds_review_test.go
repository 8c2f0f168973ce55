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
