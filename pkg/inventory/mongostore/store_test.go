package mongostore

import (
	"errors"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/inventory"

	"github.com/stocklock/stocklock/pkg/strategy"
)

func TestPutGet(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()

	if _, err := s.Get(ctx, "nope"); !errors.Is(err, inventory.ErrNotFound) {
		t.Fatalf("Get of a missing item: %v, want inventory.ErrNotFound", err)
	}
	it, err := s.Put(ctx, "A-1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if it.SKU != "A-1" || it.Stock != 10 || it.Version != 1 {
		t.Fatalf("Put returned %+v", it)
	}
	if _, err := s.FencedRead(ctx, "A-1", strategy.RedisLock, 7); err != nil {
		t.Fatal(err)
	}
	it, err = s.Put(ctx, "A-1", 3)
	if err != nil {
		t.Fatal(err)
	}
	if it.Stock != 3 || it.Version != 2 || it.Fences[strategy.RedisLock] != 7 {
		t.Fatalf("second Put returned %+v; want stock 3, version 2 and the fence kept", it)
	}
	if got := mustGet(t, s, "A-1"); got.Stock != 3 || got.Version != 2 {
		t.Fatalf("Get = %+v", got)
	}

	for _, bad := range []struct {
		sku   string
		stock int64
	}{{"", 1}, {"a/b", 1}, {"x", -1}, {string(make([]byte, 65)), 1}} {
		if _, err := s.Put(ctx, bad.sku, bad.stock); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("Put(%q, %d) = %v, want inventory.ErrInvalid", bad.sku, bad.stock, err)
		}
	}
}

func TestOrders(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	mustPut(t, s, "sku", 10)
	st := NewAtomic(s)
	var first inventory.Sale
	for i := range 3 {
		sale, err := st.Decrement(ctx, inventory.Request{SKU: "sku", Qty: 1})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = sale
		}
	}
	all := allOrders(t, s, "sku", time.Time{})
	if len(all) != 3 || all[0].ID != first.OrderID || all[0].Replica != "test" || all[0].Strategy != strategy.Atomic || !all[0].At.Equal(first.At) {
		t.Fatalf("Orders = %+v; first sale %+v", all, first)
	}
	later := allOrders(t, s, "sku", all[2].At.Add(time.Millisecond))
	if len(later) != 0 {
		t.Fatalf("Orders since after the last = %+v", later)
	}
	none, err := s.Orders(ctx, inventory.OrdersQuery{SKU: "other"})
	if err != nil || none.Orders == nil || len(none.Orders) != 0 || none.Next != "" {
		t.Fatalf("Orders of an unknown sku = %+v, %v; want an empty, non-nil list and no next page", none, err)
	}
}

func TestParseWriteConcern(t *testing.T) {
	for _, ok := range []string{"majority", "1", "3"} {
		if wc, err := ParseWriteConcern(ok); err != nil || !wc.Acknowledged() || wc.Journal == nil || !*wc.Journal {
			t.Errorf("ParseWriteConcern(%q) = %+v, %v", ok, wc, err)
		}
	}
	for _, bad := range []string{"", "0", "-1", "all", "1.5"} {
		if _, err := ParseWriteConcern(bad); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("ParseWriteConcern(%q) = %v, want inventory.ErrInvalid", bad, err)
		}
	}
}

// TestOrdersPages pages through a ledger: every order once, in order, and
// bad limits and cursors refused.
func TestOrdersPages(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	mustPut(t, s, "pages", 25)
	var ids []string
	for range 23 {
		sale, err := NewAtomic(s).Decrement(ctx, inventory.Request{SKU: "pages", Qty: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sale.OrderID)
	}
	got := allOrders(t, s, "pages", time.Time{}) // pages of 7: 7, 7, 7, 2
	seen := map[string]bool{}
	for i, o := range got {
		if seen[o.ID] {
			t.Fatalf("order %s twice", o.ID)
		}
		seen[o.ID] = true
		if i > 0 && (o.At.Before(got[i-1].At) || o.At.Equal(got[i-1].At) && o.ID < got[i-1].ID) {
			t.Fatalf("order %d out of order", i)
		}
	}
	if len(got) != len(ids) {
		t.Fatalf("%d orders over the pages, want %d", len(got), len(ids))
	}
	first, err := s.Orders(ctx, inventory.OrdersQuery{SKU: "pages"})
	if err != nil || len(first.Orders) != 23 || first.Next != "" {
		t.Fatalf("default page: %d orders, next %q, %v", len(first.Orders), first.Next, err)
	}
	for _, q := range []inventory.OrdersQuery{{SKU: "pages", Limit: -1}, {SKU: "pages", Limit: inventory.MaxOrdersLimit + 1}, {SKU: "pages", After: "%%%"}, {SKU: "pages", After: "bm90LWEtY3Vyc29y"}} {
		if _, err := s.Orders(ctx, q); !errors.Is(err, inventory.ErrInvalid) {
			t.Errorf("Orders(%+v): %v, want inventory.ErrInvalid", q, err)
		}
	}
}
