package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/services/stock/server"
)

// A replica with --nats-url sells with queued through the log; one
// without it answers 503 strategy_unavailable for queued, naming the
// setting it lacks, and sells with every other strategy; one whose NATS
// does not answer does not start.
func TestQueuedServed(t *testing.T) {
	h := newServer(t, withNATS(t, testConfig(t, "q1"))).Handler()
	if rec, _ := call(t, h, http.MethodPut, "/v1/items/qs", jsonCT, `{"stock":2}`); rec.Code != 200 {
		t.Fatalf("PUT: %d", rec.Code)
	}
	if rec, body := call(t, h, http.MethodPost, "/v1/items/qs/decrement", jsonCT, `{"qty":2,"strategy":"queued"}`); rec.Code != 200 || body["remaining"] != float64(0) {
		t.Errorf("queued with NATS: %d %v; want 200, remaining 0", rec.Code, body)
	}
	if rec, body := call(t, h, http.MethodPost, "/v1/items/qs/decrement", jsonCT, `{"qty":1,"strategy":"queued"}`); rec.Code != http.StatusConflict || body["error"] != "sold_out" {
		t.Errorf("queued after the last unit: %d %v; want 409 sold_out", rec.Code, body)
	}
	// Its gauges: the log as the NATS server counts it, and nobody
	// waiting once every buyer is answered.
	metrics, _ := call(t, h, http.MethodGet, "/metrics", "", "")
	for _, line := range []string{"\nstock_queued_log_sales ", "\nstock_queued_waiting_buyers 0\n", "\nstock_queued_oldest_wait_seconds 0\n"} {
		if !strings.Contains(metrics.Body.String(), line) {
			t.Errorf("/metrics has no %q", strings.TrimSpace(line))
		}
	}

	h = newServer(t, testConfig(t, "q2")).Handler()
	if rec, _ := call(t, h, http.MethodPut, "/v1/items/qn", jsonCT, `{"stock":1}`); rec.Code != 200 {
		t.Fatalf("PUT: %d", rec.Code)
	}
	rec, body := call(t, h, http.MethodPost, "/v1/items/qn/decrement", jsonCT, `{"qty":1,"strategy":"queued"}`)
	if msg, _ := body["message"].(string); rec.Code != http.StatusServiceUnavailable || body["error"] != "strategy_unavailable" || !strings.Contains(msg, "--nats-url / NATS_URL") {
		t.Errorf("queued without NATS: %d %v", rec.Code, body)
	}
	if rec, body := call(t, h, http.MethodPost, "/v1/items/qn/decrement", jsonCT, `{"qty":1,"strategy":"atomic"}`); rec.Code != 200 {
		t.Errorf("atomic on a replica without NATS: %d %v", rec.Code, body)
	}

	cfg := testConfig(t, "q3")
	cfg.NATSURL = "nats://127.0.0.1:1"
	if _, err := server.New(t.Context(), cfg, nil); err == nil || !strings.Contains(err.Error(), "NATS_URL") {
		t.Errorf("New with NATS not answering: %v", err)
	}
}

// pollOrder GETs path until the order is decided (not 202) and, sold, in
// the ledger (recorded); a generous bound makes an order never decided a
// failure.
func pollOrder(t *testing.T, h http.Handler, path string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		rec, body := call(t, h, http.MethodGet, path, "", "")
		if rec.Code != http.StatusAccepted && body["recorded"] != false {
			return rec, body
		}
		if rec.Code == http.StatusAccepted && (rec.Header().Get("Retry-After") != "1" || body["state"] != "queued") {
			t.Fatalf("GET %s: 202 %v, Retry-After %q; want queued, Retry-After 1", path, body, rec.Header().Get("Retry-After"))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("GET %s: still queued: %v", path, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// accepted checks a 202 of a decrement with Prefer: respond-async and
// returns the order's id and Location.
func accepted(t *testing.T, rec *httptest.ResponseRecorder, body map[string]any, sku string) (string, string) {
	t.Helper()
	id, _ := body["order_id"].(string)
	loc := rec.Header().Get("Location")
	if rec.Code != http.StatusAccepted || rec.Header().Get("Preference-Applied") != "respond-async" || body["state"] != "queued" || id == "" || loc != "/v1/items/"+sku+"/orders/"+id {
		t.Fatalf("decrement with Prefer: respond-async: %d %v (headers %v); want 202, queued, Preference-Applied and Location", rec.Code, body, rec.Header())
	}
	return id, loc
}

// TestQueuedAsync: with Prefer: respond-async, queued answers 202 with the
// order to poll; the poll answers the sale as the ledger has it, or the
// sold out a waiting buyer would have got; a keyed request sent again
// answers the same order, never a second sale, and the same key without
// the preference is another request; an unknown order is 404. Without
// the preference queued waits as always, and another strategy ignores
// it.
func TestQueuedAsync(t *testing.T) {
	h := newServer(t, withNATS(t, testConfig(t, "qa1"))).Handler()
	const sku = "qa"
	dec := "/v1/items/" + sku + "/decrement"
	async := []string{"Prefer", "wait=5, respond-async"}
	if rec, _ := call(t, h, http.MethodPut, "/v1/items/"+sku, jsonCT, `{"stock":3}`); rec.Code != 200 {
		t.Fatalf("PUT: %d", rec.Code)
	}

	rec, body := call(t, h, http.MethodPost, dec, jsonCT, `{"qty":2,"strategy":"queued"}`, async...)
	id, loc := accepted(t, rec, body, sku)
	rec, body = pollOrder(t, h, loc)
	if rec.Code != 200 || body["order_id"] != id || body["remaining"] != float64(1) || body["recorded"] != true {
		t.Fatalf("polled: %d %v; want 200, the sale, remaining 1, recorded", rec.Code, body)
	}
	_, page := call(t, h, http.MethodGet, "/v1/items/"+sku+"/orders", "", "")
	if orders, _ := page["orders"].([]any); len(orders) != 1 || orders[0].(map[string]any)["order_id"] != id || orders[0].(map[string]any)["remaining"] != float64(1) {
		t.Fatalf("the ledger: %v; want the polled sale", page)
	}

	rec, body = call(t, h, http.MethodPost, dec, jsonCT, `{"qty":2,"strategy":"queued"}`, async...)
	_, loc = accepted(t, rec, body, sku)
	if rec, body = pollOrder(t, h, loc); rec.Code != http.StatusConflict || body["error"] != "sold_out" || body["stock"] != float64(1) || body["qty"] != float64(2) {
		t.Fatalf("polled an order the stock cannot cover: %d %v; want 409 sold_out, stock 1, qty 2", rec.Code, body)
	}

	keyed := append([]string{"Idempotency-Key", "qa-key"}, async...)
	rec, body = call(t, h, http.MethodPost, dec, jsonCT, `{"qty":1,"strategy":"queued"}`, keyed...)
	id, loc = accepted(t, rec, body, sku)
	rec, body = call(t, h, http.MethodPost, dec, jsonCT, `{"qty":1,"strategy":"queued"}`, keyed...)
	if (rec.Code != http.StatusAccepted && rec.Code != http.StatusOK) || body["order_id"] != id || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the keyed request again: %d %v; want its order %s, replayed", rec.Code, body, id)
	}
	pollOrder(t, h, loc)
	rec, body = call(t, h, http.MethodPost, dec, jsonCT, `{"qty":1,"strategy":"queued"}`, keyed...)
	if rec.Code != http.StatusOK || body["order_id"] != id || body["remaining"] != float64(0) || rec.Header().Get("Idempotent-Replayed") != "true" || rec.Header().Get("Preference-Applied") != "" {
		t.Fatalf("the keyed request after its sale: %d %v; want 200, its sale, replayed", rec.Code, body)
	}
	if rec, body := call(t, h, http.MethodPost, dec, jsonCT, `{"qty":1,"strategy":"queued"}`, "Idempotency-Key", "qa-key"); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("the same key without the preference: %d %v; want 422", rec.Code, body)
	}
	_, page = call(t, h, http.MethodGet, "/v1/items/"+sku+"/orders", "", "")
	if page["count"] != float64(2) {
		t.Fatalf("the ledger: %v; want 2 sales", page)
	}

	for path, want := range map[string]string{
		"/v1/items/" + sku + "/orders/0123456789abcdef": "order_not_found",
		"/v1/items/nope/orders/0123456789abcdef":        "not_found",
		"/v1/items/" + sku + "/orders/no.such":          "invalid_order_id",
	} {
		if rec, body := call(t, h, http.MethodGet, path, "", ""); body["error"] != want {
			t.Errorf("GET %s: %d %v; want %s", path, rec.Code, body, want)
		}
	}

	if rec, _ := call(t, h, http.MethodPut, "/v1/items/"+sku, jsonCT, `{"stock":2}`); rec.Code != 200 {
		t.Fatalf("PUT: %d", rec.Code)
	}
	if rec, body := call(t, h, http.MethodPost, dec, jsonCT, `{"qty":1,"strategy":"queued"}`); rec.Code != 200 || body["remaining"] != float64(1) {
		t.Fatalf("queued without the preference: %d %v; want the sale", rec.Code, body)
	}
	if rec, body := call(t, h, http.MethodPost, dec, jsonCT, `{"qty":1,"strategy":"atomic"}`, async...); rec.Code != 200 || body["remaining"] != float64(0) || rec.Header().Get("Preference-Applied") != "" {
		t.Fatalf("atomic with the preference: %d %v %v; want the sale, no Preference-Applied", rec.Code, body, rec.Header())
	}
}
