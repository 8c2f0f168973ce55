package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidSKU(t *testing.T) {
	for sku, want := range map[string]bool{
		"A-1": true, "a.b_c-9": true, strings.Repeat("x", MaxSKULen): true,
		"": false, ".": false, "..": false, "a/b": false, "a b": false, strings.Repeat("x", MaxSKULen+1): false, "é": false,
	} {
		if got := ValidSKU(sku); got != want {
			t.Errorf("ValidSKU(%q) = %v, want %v", sku, got, want)
		}
		if err := CheckSKU(sku); (err == nil) != want || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("CheckSKU(%q) = %v", sku, err)
		}
	}
}

func TestValidKey(t *testing.T) {
	for key, want := range map[string]bool{
		"k": true, " ~": true, strings.Repeat("k", MaxKeyLen): true,
		"": false, "tab\t": false, "é": false, strings.Repeat("k", MaxKeyLen+1): false,
	} {
		if got := ValidKey(key); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestRequestValidate: a request is refused, as ErrInvalid, for its sku,
// qty, order id or key, before any I/O.
func TestRequestValidate(t *testing.T) {
	ok := Request{SKU: "s", Qty: 1, OrderID: "abc_1-2", Key: "key"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid request: %v", err)
	}
	for name, r := range map[string]Request{
		"sku":      {SKU: "..", Qty: 1},
		"qty":      {SKU: "s", Qty: 0},
		"order id": {SKU: "s", Qty: 1, OrderID: "has.dot"},
		"key":      {SKU: "s", Qty: 1, Key: "\x00"},
	} {
		if err := r.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
}

// TestOrderSale: an order read back as a sale keeps what it recorded, and
// says "unknown" (-1) for a remaining stock it did not record.
func TestOrderSale(t *testing.T) {
	at := time.Now()
	five := int64(5)
	o := Order{ID: "o", SKU: "s", Qty: 2, Replica: "a", Strategy: "x", Fence: 7, At: at, Key: "k"}
	if s := o.Sale(); s.Remaining != -1 || s.Attempts != 1 || s.OrderID != "o" || s.Fence != 7 || s.Key != "k" || !s.At.Equal(at) {
		t.Errorf("Sale() = %+v", s)
	}
	o.Remaining, o.Attempts = &five, 3
	if s := o.Sale(); s.Remaining != 5 || s.Attempts != 3 {
		t.Errorf("Sale() = %+v: want remaining 5, attempts 3", s)
	}
	if !errors.Is(&SoldOutError{SKU: "s", Stock: 1, Qty: 2}, ErrSoldOut) {
		t.Error("a SoldOutError is not ErrSoldOut")
	}
}
