package server_test

import (
	"net/http"
	"strings"
	"testing"

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
