package mongostore

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stocklock/stocklock/pkg/inventory"
)

func TestRestock(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	mustPut(t, s, "r", 2)

	it, replayed, err := s.Restock(ctx, "r", "k1", 5)
	if err != nil || replayed || it.Stock != 7 || it.Version != 2 {
		t.Fatalf("first restock: %+v, replayed %v, %v; want stock 7 at version 2", it, replayed, err)
	}
	it, replayed, err = s.Restock(ctx, "r", "k1", 5)
	if err != nil || !replayed || it.Stock != 7 || it.Version != 2 {
		t.Fatalf("the same restock again: %+v, replayed %v, %v; want the replay, stock 7", it, replayed, err)
	}
	if _, _, err := s.Restock(ctx, "r", "k1", 4); !errors.Is(err, inventory.ErrKeyReused) {
		t.Fatalf("the key with another qty: %v; want ErrKeyReused", err)
	}
	var ie *inventory.InsufficientError
	if _, _, err := s.Restock(ctx, "r", "k2", -8); !errors.As(err, &ie) || ie.Stock != 7 || ie.Qty != -8 || !errors.Is(err, inventory.ErrInsufficient) {
		t.Fatalf("removing 8 of 7: %v; want an InsufficientError of stock 7", err)
	}
	// A refused restock did not use its key up.
	if it, _, err := s.Restock(ctx, "r", "k2", -7); err != nil || it.Stock != 0 {
		t.Fatalf("removing 7 of 7 with the refused key: %+v, %v", it, err)
	}
	if _, _, err := s.Restock(ctx, "nope", "k1", 1); !errors.Is(err, inventory.ErrNotFound) {
		t.Fatalf("restock of an unknown sku: %v", err)
	}
	for _, bad := range []struct {
		sku, key string
		qty      int64
	}{{"r", "k", 0}, {"r", "", 1}, {"a/b", "k", 1}, {"r", "k", inventory.MaxRestockQty + 1}, {"r", "k", -inventory.MaxRestockQty - 1}} {
		if _, _, err := s.Restock(ctx, bad.sku, bad.key, bad.qty); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("Restock(%q, %q, %d) = %v; want ErrInvalid", bad.sku, bad.key, bad.qty, err)
		}
	}
	if got := mustGet(t, s, "r"); got.Stock != 0 || got.Version != 3 {
		t.Fatalf("item %+v; want stock 0 at version 3", got)
	}

	// The item remembers the last RestockKeys keys, and no more.
	for i := range restockKeys + 5 {
		if _, _, err := s.Restock(ctx, "r", fmt.Sprintf("bulk-%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.getDoc(ctx, s.items, "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Restocks) != restockKeys || got.Stock != restockKeys+5 {
		t.Fatalf("after %d restocks: %d keys kept, stock %d; want %d and %d",
			restockKeys+5, len(got.Restocks), got.Stock, restockKeys, restockKeys+5)
	}
	// The newest are kept: the last one replays; the first ones are forgotten.
	if _, replayed, err := s.Restock(ctx, "r", fmt.Sprintf("bulk-%d", restockKeys+4), 1); err != nil || !replayed {
		t.Fatalf("the newest key again: replayed %v, %v", replayed, err)
	}
	if _, replayed, err := s.Restock(ctx, "r", "bulk-0", 1); err != nil || replayed {
		t.Fatalf("the oldest key again, after %d newer: replayed %v, %v; want it applied as new", restockKeys+4, replayed, err)
	}
}

// TestRestockUnderSales: two stores on one database (two replicas) sell
// with the atomic and the optimistic strategy while restocks, each sent
// three times with its key on both, run among the sales: each restock
// counts once, and the stock is what was put, plus the restocks, minus
// what the ledger sold.
func TestRestockUnderSales(t *testing.T) {
	db := testDB(t)
	var stores [2]*Store
	for i := range stores {
		s, err := NewStore(db, StoreOptions{Replica: fmt.Sprintf("r%d", i), Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	ctx := t.Context()
	const start, restocks, qty = 40, 8, 3
	mustPut(t, stores[0], "hot", start)

	var wg sync.WaitGroup
	var sold atomic.Int64
	for i, s := range stores {
		for _, st := range []inventory.Strategy{NewAtomic(s), NewOptimistic(s, 20, 0)} {
			wg.Go(func() {
				for range 15 {
					if _, err := st.Decrement(ctx, inventory.Request{SKU: "hot", Qty: 1}); err == nil {
						sold.Add(1)
					} else if !errors.Is(err, inventory.ErrConflict) && !errors.Is(err, inventory.ErrSoldOut) {
						t.Errorf("sale on r%d: %v", i, err)
					}
				}
			})
		}
	}
	var applied, replays atomic.Int64
	for k := range restocks {
		for try := range 3 {
			wg.Go(func() {
				_, replayed, err := stores[try%2].Restock(ctx, "hot", fmt.Sprintf("restock-%d", k), qty)
				switch {
				case err != nil:
					t.Errorf("restock %d, try %d: %v", k, try, err)
				case replayed:
					replays.Add(1)
				default:
					applied.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if applied.Load() != restocks || replays.Load() != 2*restocks {
		t.Fatalf("%d restocks applied and %d replayed; want %d and %d", applied.Load(), replays.Load(), restocks, 2*restocks)
	}
	it := mustGet(t, stores[0], "hot")
	if want := start + restocks*qty - sold.Load(); it.Stock != want || mustCount(t, stores[0], "hot") != sold.Load() {
		t.Fatalf("stock %d and %d orders after %d sales; want stock %d", it.Stock, mustCount(t, stores[0], "hot"), sold.Load(), want)
	}
}
