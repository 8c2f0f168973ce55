package server_test

import (
	"fmt"
	"net/http"
	"testing"
)

// TestSoldOutShortcutMetrics: on one replica, a sale after the last unit
// is answered by the strategy (which marks the sku), the next by the
// shortcut's read, and /metrics counts each by its path; a PUT through
// another replica of the same database then sells on the first at once.
func TestSoldOutShortcutMetrics(t *testing.T) {
	cfg := testConfig(t, "r1")
	h := newServer(t, cfg).Handler()
	cfg2 := testConfig(t, "r2")
	cfg2.DB = cfg.DB
	h2 := newServer(t, cfg2).Handler()
	put := func(h http.Handler, stock int) {
		t.Helper()
		if rec, _ := call(t, h, http.MethodPut, "/v1/items/so", jsonCT, fmt.Sprintf(`{"stock": %d}`, stock)); rec.Code != http.StatusOK {
			t.Fatalf("PUT: %d", rec.Code)
		}
	}
	sell := func(want int) {
		t.Helper()
		if rec, body := call(t, h, http.MethodPost, "/v1/items/so/decrement", jsonCT, `{"qty": 1, "strategy": "atomic"}`); rec.Code != want {
			t.Fatalf("decrement: %d %v; want %d", rec.Code, body, want)
		}
	}
	put(h, 1)
	sell(http.StatusOK)
	sell(http.StatusConflict)
	sell(http.StatusConflict)
	expectMetrics(t, "after two sold outs", scrape(t, h), map[string]float64{
		`stock_sold_out_total{path="strategy",strategy="atomic"}`:     1,
		`stock_sold_out_total{path="read",strategy="atomic"}`:         1,
		`stock_sold_out_reads_total{strategy="atomic"}`:               1,
		`stock_sold_out_total{path="read",strategy="redis-stock"}`:    0,
		`stock_decrements_total{result="sold_out",strategy="atomic"}`: 2,
	})
	put(h2, 1)
	sell(http.StatusOK)
}
