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
