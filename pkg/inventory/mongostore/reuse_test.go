package mongostore

import (
	"errors"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"
)

// TestFreedKeyKeepsItsRequest: a key whose request sold nothing is freed
// for a retry of that request, and only of that request. Another request
// with the key (another qty here) answers ErrKeyReused and sells nothing,
// whichever way the key was freed: by its own request failing (sold out),
// or by recovery giving its attempt up.
func TestFreedKeyKeepsItsRequest(t *testing.T) {
	base := testStore(t)
	s := replicaStore(t, base, StoreOptions{Replica: "a", AbandonAfter: time.Hour})
	b := replicaStore(t, base, StoreOptions{Replica: "b"})
	ctx := t.Context()
	mustPut(t, s, "reuse", 3)

	// Freed by its own request: qty 5 of 3 is sold out.
	five := inventory.Request{SKU: "reuse", Qty: 5, Key: "K"}
	if _, _, err := s.DecrementOnce(ctx, NewAtomic(s), five, ""); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("qty 5 of 3: %v, want inventory.ErrSoldOut", err)
	}
	two := inventory.Request{SKU: "reuse", Qty: 2, Key: "K"}
	for _, st := range []*Store{s, b} {
		if sale, _, err := st.DecrementOnce(ctx, NewAtomic(st), two, ""); !errors.Is(err, inventory.ErrKeyReused) {
			t.Fatalf("the freed key with qty 2 on %s: sale %+v, %v; want inventory.ErrKeyReused", st.replica, sale, err)
		}
	}
	if it, n := mustGet(t, s, "reuse"), mustCount(t, s, "reuse"); it.Stock != 3 || n != 0 {
		t.Fatalf("stock %d, orders %d: want 3 and 0, nothing sold", it.Stock, n)
	}
	// The same request may try again, and sells once there is stock.
	mustPut(t, s, "reuse", 5)
	if _, replayed, err := b.DecrementOnce(ctx, NewAtomic(b), five, ""); err != nil || replayed {
		t.Fatalf("retry of qty 5 after a restock: replayed %v, %v; want a sale", replayed, err)
	}

	// Freed by recovery: the attempt of key G (qty 1) was left in flight
	// by s and is given up by s's next recovery.
	one := inventory.Request{SKU: "reuse", Qty: 1, Key: "G"}
	mustPut(t, s, "reuse", 10)
	rec, err := s.newKeyRecord(t.Context(), one, fingerprint(one, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.beginAttempt(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.keys.InsertOne(ctx, rec); err != nil {
		t.Fatal(err)
	}
	s.inFlight.remove(rec.OrderID)
	if got, err := s.RecoverKeys(ctx); err != nil || got.Abandoned != 1 {
		t.Fatalf("recovery: %+v, %v; want the attempt given up", got, err)
	}
	other := inventory.Request{SKU: "reuse", Qty: 2, Key: "G"}
	if sale, _, err := b.DecrementOnce(ctx, NewAtomic(b), other, ""); !errors.Is(err, inventory.ErrKeyReused) {
		t.Fatalf("the given-up key with qty 2: sale %+v, %v; want inventory.ErrKeyReused", sale, err)
	}
	if it := mustGet(t, s, "reuse"); it.Stock != 10 {
		t.Fatalf("stock %d, want 10: nothing sold with the reused key", it.Stock)
	}
	if sale, replayed, err := b.DecrementOnce(ctx, NewAtomic(b), one, ""); err != nil || replayed || sale.Remaining != 9 {
		t.Fatalf("retry of the given-up request: %+v, replayed %v, %v; want a sale leaving 9", sale, replayed, err)
	}
}
