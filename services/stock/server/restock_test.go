package server_test

import (
	"net/http"
	"testing"
)

// TestRestockAnswers: a restock needs the admin token and an
// Idempotency-Key; it adds qty once per key (the same key again answers
// the item, replayed, and changes nothing; with another qty it is 422);
// it never takes the stock below zero (409 insufficient_stock, nothing
// changed); and a PUT never erases what it remembers.
func TestRestockAnswers(t *testing.T) {
	h := newServer(t, testConfig(t, "r1")).Handler()
	putStock(t, h, "rs", 5)
	const path, key = "/v1/items/rs/restock", "Idempotency-Key"

	want(t, "without the token", ask(h, http.MethodPost, path, `{"qty":3}`, key, "a", "Authorization", ""), http.StatusUnauthorized, "unauthorized")
	want(t, "without a key", ask(h, http.MethodPost, path, `{"qty":3}`), http.StatusBadRequest, "invalid_idempotency_key")
	want(t, "qty 0", ask(h, http.MethodPost, path, `{"qty":0}`, key, "a"), http.StatusBadRequest, "invalid_qty")
	want(t, "qty too large", ask(h, http.MethodPost, path, `{"qty":1000000001}`, key, "a"), http.StatusBadRequest, "invalid_qty")
	want(t, "an unknown sku", ask(h, http.MethodPost, "/v1/items/nope/restock", `{"qty":3}`, key, "a"), http.StatusNotFound, "not_found")
	if n := stockOf(t, h, "rs"); n != 5 {
		t.Fatalf("stock %d after refused restocks; want 5", n)
	}

	rec, out := call(t, h, http.MethodPost, path, jsonCT, `{"qty":3}`, key, "a")
	if rec.Code != http.StatusOK || out["stock"].(float64) != 8 || rec.Header().Get("Idempotent-Replayed") != "" || rec.Header().Get("ETag") == "" {
		t.Fatalf("first restock: %d %v %v; want 200, stock 8", rec.Code, out, rec.Header())
	}
	rec, out = call(t, h, http.MethodPost, path, jsonCT, `{"qty":3}`, key, "a")
	if rec.Code != http.StatusOK || out["stock"].(float64) != 8 || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same restock again: %d %v %v; want 200 replayed, stock 8", rec.Code, out, rec.Header())
	}
	want(t, "the key with another qty", ask(h, http.MethodPost, path, `{"qty":4}`, key, "a"), http.StatusUnprocessableEntity, "idempotency_key_reused")
	rec, out = call(t, h, http.MethodPost, path, jsonCT, `{"qty":-9}`, key, "b")
	if rec.Code != http.StatusConflict || out["error"] != "insufficient_stock" || out["stock"].(float64) != 8 || out["qty"].(float64) != -9 {
		t.Fatalf("removing 9 of 8: %d %v; want 409 insufficient_stock, stock 8, qty -9", rec.Code, out)
	}
	want(t, "removing 8 of 8", ask(h, http.MethodPost, path, `{"qty":-8}`, key, "b"), http.StatusOK, "")
	putStock(t, h, "rs", 1)
	want(t, "the first key after a PUT", ask(h, http.MethodPost, path, `{"qty":3}`, key, "a"), http.StatusOK, "")
	if n := stockOf(t, h, "rs"); n != 1 {
		t.Fatalf("stock %d: a remembered restock was applied again after a PUT; want 1", n)
	}
}
