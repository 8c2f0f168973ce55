package inventory

import (
	"errors"
	"testing"
	"time"
)

func TestPutGet(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()

	if _, err := s.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing item: %v, want ErrNotFound", err)
	}
	it, err := s.Put(ctx, "A-1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if it.SKU != "A-1" || it.Stock != 10 || it.Version != 1 {
		t.Fatalf("Put returned %+v", it)
	}
	if _, err := s.FencedRead(ctx, "A-1", NameRedisLock, 7); err != nil {
		t.Fatal(err)
	}
	it, err = s.Put(ctx, "A-1", 3)
	if err != nil {
		t.Fatal(err)
	}
	if it.Stock != 3 || it.Version != 2 || it.Fences[NameRedisLock] != 7 {
		t.Fatalf("second Put returned %+v; want stock 3, version 2 and the fence kept", it)
	}
	if got := mustGet(t, s, "A-1"); got.Stock != 3 || got.Version != 2 {
		t.Fatalf("Get = %+v", got)
	}

	for _, bad := range []struct {
		sku   string
		stock int64
	}{{"", 1}, {"a/b", 1}, {"x", -1}, {string(make([]byte, 65)), 1}} {
		if _, err := s.Put(ctx, bad.sku, bad.stock); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put(%q, %d) = %v, want ErrInvalid", bad.sku, bad.stock, err)
		}
	}
}

func TestOrders(t *testing.T) {
	s := testStore(t)
	ctx := t.Context()
	mustPut(t, s, "sku", 10)
	st := NewAtomic(s)
	var first Sale
	for i := range 3 {
		sale, err := st.Decrement(ctx, Request{SKU: "sku", Qty: 1})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = sale
		}
	}
	all, err := s.Orders(ctx, "sku", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[0].ID != first.OrderID || all[0].Replica != "test" || all[0].Strategy != NameAtomic || !all[0].At.Equal(first.At) {
		t.Fatalf("Orders = %+v; first sale %+v", all, first)
	}
	later, err := s.Orders(ctx, "sku", all[2].At.Add(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if len(later) != 0 {
		t.Fatalf("Orders since after the last = %+v", later)
	}
	none, err := s.Orders(ctx, "other", time.Time{})
	if err != nil || none == nil || len(none) != 0 {
		t.Fatalf("Orders of an unknown sku = %v, %v; want an empty, non-nil list", none, err)
	}
}

func TestParseWriteConcern(t *testing.T) {
	for _, ok := range []string{"majority", "1", "3"} {
		if wc, err := ParseWriteConcern(ok); err != nil || !wc.Acknowledged() || wc.Journal == nil || !*wc.Journal {
			t.Errorf("ParseWriteConcern(%q) = %+v, %v", ok, wc, err)
		}
	}
	for _, bad := range []string{"", "0", "-1", "all", "1.5"} {
		if _, err := ParseWriteConcern(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseWriteConcern(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}
