package server_test

import (
	"net/http"
	"testing"
	"time"
)

// TestHoldsAPI: a hold's create, read, confirm and release through one
// replica, every answer checked against openapi.json, with each error
// code of holds: a held unit is sold to no one else, a confirm twice is
// one order, a release gives the unit back, and bad input changes
// nothing.
func TestHoldsAPI(t *testing.T) {
	h := newServer(t, testConfig(t, "r1")).Handler()
	const sku = "holds-api"
	putStock(t, h, sku, 3)
	holds := "/v1/items/" + sku + "/holds"

	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"ttl under 1 s", "POST", holds, `{"qty":1,"ttl_ms":999,"strategy":"atomic"}`, 400, "invalid_ttl"},
		{"ttl over 15 min", "POST", holds, `{"qty":1,"ttl_ms":900001,"strategy":"atomic"}`, 400, "invalid_ttl"},
		{"no ttl", "POST", holds, `{"qty":1,"strategy":"atomic"}`, 400, "missing_field"},
		{"zero qty", "POST", holds, `{"qty":0,"ttl_ms":1000,"strategy":"atomic"}`, 400, "invalid_qty"},
		{"a strategy that takes no part", "POST", holds, `{"qty":1,"ttl_ms":1000,"strategy":"optimistic"}`, 501, "holds_unsupported"},
		{"no such item", "POST", "/v1/items/nope/holds", `{"qty":1,"ttl_ms":1000,"strategy":"atomic"}`, 404, "not_found"},
		{"bad hold id", "GET", holds + "/bad.id", "", 400, "invalid_hold_id"},
		{"unknown hold", "GET", holds + "/nope", "", 404, "hold_not_found"},
		{"confirm of an unknown hold", "POST", holds + "/nope/confirm", "", 404, "hold_not_found"},
		{"release with a query", "POST", holds + "/nope/release?force=1", "", 400, "unknown_parameter"},
	} {
		a := ask(h, c.method, c.path, c.body)
		if a.status != c.status || a.code != c.code {
			t.Errorf("%s: %d %s; want %d %s", c.name, a.status, a.code, c.status, c.code)
		}
	}
	if got := stockOf(t, h, sku); got != 3 {
		t.Fatalf("bad input changed the stock to %d", got)
	}

	rec, hold := call(t, h, http.MethodPost, holds, jsonCT, `{"qty":2,"ttl_ms":60000,"strategy":"atomic"}`)
	if rec.Code != http.StatusCreated || hold["state"] != "held" {
		t.Fatalf("create: %d %v", rec.Code, hold)
	}
	id := hold["hold_id"].(string)
	_, item := call(t, h, http.MethodGet, "/v1/items/"+sku, "", "")
	if item["stock"].(float64) != 1 || item["held"].(float64) != 2 {
		t.Fatalf("item after the hold: %v", item)
	}
	want(t, "decrement of held units", ask(h, "POST", "/v1/items/"+sku+"/decrement", `{"qty":2,"strategy":"atomic"}`), 409, "sold_out")

	rec, sale := call(t, h, http.MethodPost, holds+"/"+id+"/confirm", "", "")
	if rec.Code != http.StatusOK || sale["order_id"] != id || rec.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("confirm: %d %v", rec.Code, sale)
	}
	if remaining, ok := sale["remaining"]; !ok || remaining != nil {
		t.Fatalf("confirm: remaining %v (present %v); want null, as stockapi.Sale.Remaining says", remaining, ok)
	}
	rec, again := call(t, h, http.MethodPost, holds+"/"+id+"/confirm", "", "", "Idempotency-Key", "confirm-1")
	if rec.Code != http.StatusOK || again["order_id"] != id || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("second confirm: %d %v", rec.Code, again)
	}
	want(t, "release of a confirmed hold", ask(h, "POST", holds+"/"+id+"/release", ""), 409, "hold_confirmed")
	if _, got := call(t, h, http.MethodGet, holds+"/"+id, "", ""); got["state"] != "confirmed" || got["order_id"] != id {
		t.Fatalf("read of the confirmed hold: %v", got)
	}

	// The replica's default strategy (mongo-lease) takes part too.
	rec, two := call(t, h, http.MethodPost, holds, jsonCT, `{"qty":1,"ttl_ms":60000}`)
	if rec.Code != http.StatusCreated || two["strategy"] != "mongo-lease" || two["fence"].(float64) <= 0 {
		t.Fatalf("create with the default strategy: %d %v", rec.Code, two)
	}
	id2 := two["hold_id"].(string)
	for range 2 {
		if rec, got := call(t, h, http.MethodPost, holds+"/"+id2+"/release", "", ""); rec.Code != http.StatusOK || got["state"] != "released" {
			t.Fatalf("release: %d %v", rec.Code, got)
		}
	}
	want(t, "confirm of a released hold", ask(h, "POST", holds+"/"+id2+"/confirm", ""), 409, "hold_released")

	// Idempotency-Key on create.
	rec, k1 := call(t, h, http.MethodPost, holds, jsonCT, `{"qty":1,"ttl_ms":60000,"strategy":"atomic"}`, "Idempotency-Key", "cart-7")
	if rec.Code != http.StatusCreated {
		t.Fatalf("keyed create: %d %v", rec.Code, k1)
	}
	rec, k2 := call(t, h, http.MethodPost, holds, jsonCT, `{"qty":1,"ttl_ms":60000,"strategy":"atomic"}`, "Idempotency-Key", "cart-7")
	if rec.Code != http.StatusCreated || k2["hold_id"] != k1["hold_id"] || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("keyed create again: %d %v; want hold %v replayed", rec.Code, k2, k1["hold_id"])
	}
	want(t, "key reused", ask(h, "POST", holds, `{"qty":2,"ttl_ms":60000,"strategy":"atomic"}`, "Idempotency-Key", "cart-7"), 422, "idempotency_key_reused")
	if _, item := call(t, h, http.MethodGet, "/v1/items/"+sku, "", ""); item["stock"].(float64) != 0 || item["held"].(float64) != 1 {
		t.Fatalf("item after the keyed holds: %v; want stock 0, held 1", item)
	}
}

// TestHoldExpiresAPI: a hold of 1 s runs out; its confirm is refused with
// hold_expired, and a strategy that takes no part in holds sells its
// unit at once (the replica returns it first), with no sweeper. Slow: it
// waits for the time to live.
func TestHoldExpiresAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a hold's 1 s time to live")
	}
	cfg := testConfig(t, "r1")
	cfg.RecoveryEvery = time.Hour // no tidying: the sale alone must find the unit
	h := newServer(t, cfg).Handler()
	const sku = "holds-exp"
	putStock(t, h, sku, 1)
	holds := "/v1/items/" + sku + "/holds"
	rec, hold := call(t, h, http.MethodPost, holds, jsonCT, `{"qty":1,"ttl_ms":1000,"strategy":"atomic"}`)
	if rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %v", rec.Code, hold)
	}
	id := hold["hold_id"].(string)
	want(t, "sale of the held unit", ask(h, "POST", "/v1/items/"+sku+"/decrement", `{"qty":1,"strategy":"optimistic"}`), 409, "sold_out")
	time.Sleep(1200 * time.Millisecond)
	if _, got := call(t, h, http.MethodGet, holds+"/"+id, "", ""); got["state"] != "expired" {
		t.Fatalf("read after the expiry: %v", got)
	}
	if a := ask(h, "POST", "/v1/items/"+sku+"/decrement", `{"qty":1,"strategy":"optimistic"}`); a.status != http.StatusOK {
		t.Fatalf("sale of the expired hold's unit: %+v", a)
	}
	want(t, "confirm after the expiry", ask(h, "POST", holds+"/"+id+"/confirm", ""), 409, "hold_expired")
	if _, item := call(t, h, http.MethodGet, "/v1/items/"+sku, "", ""); item["stock"].(float64) != 0 || item["held"].(float64) != 0 {
		t.Fatalf("item: %v; want stock 0, held 0", item)
	}
}
