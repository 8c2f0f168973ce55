package server_test

import (
	"net/http"
	"testing"
)

// TestPutSplit: a PUT with "split" sets the stock split across the
// replica's buckets, so that an atomic decrement, which sells from the
// item document alone, finds the item's own stock empty and sells from a
// bucket (its sale's remaining is then unknown: null); after a plain PUT
// it sells from the item and knows the remaining stock.
func TestPutSplit(t *testing.T) {
	s := newServer(t, testConfig(t, "r1"))
	h := s.Handler()
	for _, tc := range []struct {
		sku, body string
		remaining any
	}{
		{"split-true", `{"stock": 40, "split": true}`, nil},
		{"split-false", `{"stock": 40, "split": false}`, 39.0},
		{"split-absent", `{"stock": 40}`, 39.0},
	} {
		sku := tc.sku
		if rec, item := call(t, h, http.MethodPut, "/v1/items/"+sku, jsonCT, tc.body); rec.Code != 200 || item["stock"] != 40.0 {
			t.Fatalf("PUT %s: %d %v", tc.body, rec.Code, item)
		}
		rec, sale := call(t, h, http.MethodPost, "/v1/items/"+sku+"/decrement", jsonCT, `{"qty": 1, "strategy": "atomic"}`)
		if rec.Code != 200 || sale["remaining"] != tc.remaining {
			t.Errorf("atomic decrement after PUT %s: %d %v; want remaining %v", tc.body, rec.Code, sale, tc.remaining)
		}
		for range 2 {
			if rec, sale := call(t, h, http.MethodPost, "/v1/items/"+sku+"/decrement", jsonCT, `{"qty": 1, "strategy": "buckets"}`); rec.Code != 200 {
				t.Errorf("buckets decrement after PUT %s: %d %v", tc.body, rec.Code, sale)
			}
		}
		if rec, item := call(t, h, http.MethodGet, "/v1/items/"+sku, "", ""); rec.Code != 200 || item["stock"] != 37.0 {
			t.Errorf("GET after PUT %s and 3 sales: %d %v; want stock 37", tc.body, rec.Code, item)
		}
	}
}

// TestHoldOnSplitStock: a hold on an item whose stock is split across the
// buckets is answered 501 holds_unsupported, not 409 sold_out: the
// buckets hold the units, and a hold takes from the item's own stock
// only. Nothing changes.
func TestHoldOnSplitStock(t *testing.T) {
	h := newServer(t, testConfig(t, "r1")).Handler()
	const sku = "split-hold"
	if rec, item := call(t, h, http.MethodPut, "/v1/items/"+sku, jsonCT, `{"stock": 40, "split": true}`); rec.Code != 200 || item["stock"] != 40.0 {
		t.Fatalf("PUT split: %d %v", rec.Code, item)
	}
	for _, st := range []string{"atomic", "mongo-lease"} {
		want(t, "hold with "+st+" on split stock",
			ask(h, "POST", "/v1/items/"+sku+"/holds", `{"qty":1,"ttl_ms":60000,"strategy":"`+st+`"}`), 501, "holds_unsupported")
	}
	if got := stockOf(t, h, sku); got != 40 {
		t.Fatalf("the refused holds changed the stock to %d", got)
	}
}
