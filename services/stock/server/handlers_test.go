package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
)

// send sends one request to h and returns the answer; a PUT carries the
// admin token. header is name, value pairs, replacing what send set. It
// may run in any goroutine.
func send(h http.Handler, method, path, contentType, body string, header ...string) *httptest.ResponseRecorder {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if method == http.MethodPut || strings.HasSuffix(path, "/restock") {
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Del(header[i])
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// call sends one request to h and decodes the JSON answer. header is
// name, value pairs.
func call(t *testing.T, h http.Handler, method, path, contentType, body string, header ...string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	rec := send(h, method, path, contentType, body, header...)
	var out map[string]any
	if method != http.MethodHead && !strings.HasPrefix(path, "/metrics") {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %v: %q", method, path, err, rec.Body.String())
		}
	}
	return rec, out
}

const jsonCT = "application/json"

func TestBadInput(t *testing.T) {
	cfg := testConfig(t, "r1")
	s := newServer(t, cfg)
	h := s.Handler()
	const sku = "bad-input"
	if rec, _ := call(t, h, http.MethodPut, "/v1/items/"+sku, jsonCT, `{"stock": 5}`); rec.Code != http.StatusOK {
		t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
	}
	dec := "/v1/items/" + sku + "/decrement"

	cases := []struct {
		name, method, path, ct, body string
		status                       int
		code                         string
		header                       []string // name, value pairs
	}{
		{"malformed JSON", "POST", dec, jsonCT, `{"qty":`, 400, "invalid_json", nil},
		{"unquoted key", "POST", dec, jsonCT, `{qty: 1}`, 400, "invalid_json", nil},
		{"empty body", "POST", dec, jsonCT, ``, 400, "invalid_json", nil},
		{"two objects", "POST", dec, jsonCT, `{"qty":1}{"qty":1}`, 400, "invalid_json", nil},
		{"qty as string", "POST", dec, jsonCT, `{"qty":"1"}`, 400, "invalid_type", nil},
		{"qty as bool", "POST", dec, jsonCT, `{"qty":true}`, 400, "invalid_type", nil},
		{"qty as object", "POST", dec, jsonCT, `{"qty":{"n":1}}`, 400, "invalid_type", nil},
		{"strategy as number", "POST", dec, jsonCT, `{"qty":1,"strategy":5}`, 400, "invalid_type", nil},
		{"body is an array", "POST", dec, jsonCT, `[{"qty":1}]`, 400, "invalid_type", nil},
		{"body is null", "POST", dec, jsonCT, `null`, 400, "invalid_type", nil},
		{"unknown field", "POST", dec, jsonCT, `{"qty":1,"price":3}`, 400, "unknown_field", nil},
		{"field in wrong case", "POST", dec, jsonCT, `{"QTY":1}`, 400, "unknown_field", nil},
		{"missing qty", "POST", dec, jsonCT, `{"strategy":"atomic"}`, 400, "missing_field", nil},
		{"null qty", "POST", dec, jsonCT, `{"qty":null}`, 400, "missing_field", nil},
		{"zero qty", "POST", dec, jsonCT, `{"qty":0}`, 400, "invalid_qty", nil},
		{"negative qty", "POST", dec, jsonCT, `{"qty":-1}`, 400, "invalid_qty", nil},
		{"qty above max", "POST", dec, jsonCT, `{"qty":101}`, 400, "invalid_qty", nil},
		{"fractional qty", "POST", dec, jsonCT, `{"qty":1.5}`, 400, "invalid_qty", nil},
		{"qty 1.0", "POST", dec, jsonCT, `{"qty":1.0}`, 400, "invalid_qty", nil},
		{"qty in exponent form", "POST", dec, jsonCT, `{"qty":1e1}`, 400, "invalid_qty", nil},
		{"qty over int64", "POST", dec, jsonCT, `{"qty":99999999999999999999}`, 400, "invalid_qty", nil},
		{"sku with a dollar", "POST", "/v1/items/bad$sku/decrement", jsonCT, `{"qty":1}`, 400, "invalid_sku", nil},
		{"sku with an escaped slash", "POST", "/v1/items/bad%2Finput/decrement", jsonCT, `{"qty":1}`, 400, "invalid_sku", nil},
		{"sku too long", "POST", "/v1/items/" + strings.Repeat("a", 65) + "/decrement", jsonCT, `{"qty":1}`, 400, "invalid_sku", nil},
		{"unknown strategy", "POST", dec, jsonCT, `{"qty":1,"strategy":"yolo"}`, 400, "unknown_strategy", nil},
		{"etcd-lock without etcd", "POST", dec, jsonCT, `{"qty":1,"strategy":"etcd-lock"}`, 503, "strategy_unavailable", nil},
		{"redlock without its servers", "POST", dec, jsonCT, `{"qty":1,"strategy":"redlock"}`, 503, "strategy_unavailable", nil},
		{"body over 4 KiB", "POST", dec, jsonCT, `{"qty":1,"strategy":"` + strings.Repeat("x", 5000) + `"}`, 413, "body_too_large", nil},
		{"text/plain", "POST", dec, "text/plain", `{"qty":1}`, 415, "unsupported_media_type", nil},
		{"no Content-Type", "POST", dec, "", `{"qty":1}`, 415, "unsupported_media_type", nil},
		{"latin-1 JSON", "POST", dec, "application/json; charset=latin1", `{"qty":1}`, 415, "unsupported_media_type", nil},
		{"form body", "POST", dec, "application/x-www-form-urlencoded", `qty=1`, 415, "unsupported_media_type", nil},
		{"strategy in the query", "POST", dec + "?strategy=nope", jsonCT, `{"qty":1}`, 400, "unknown_parameter", nil},
		{"valid strategy in the query", "POST", dec + "?strategy=atomic", jsonCT, `{"qty":1}`, 400, "unknown_parameter", nil},
		{"strategy in a malformed query", "POST", dec + "?strategy=local;", jsonCT, `{"qty":1}`, 400, "unknown_parameter", nil},
		{"strategy with a bad escape", "POST", dec + "?strategy=%zz", jsonCT, `{"qty":1}`, 400, "unknown_parameter", nil},
		{"query on GET item", "GET", "/v1/items/" + sku + "?fields=stock", "", "", 400, "unknown_parameter", nil},
		{"query on PUT", "PUT", "/v1/items/" + sku + "?force=1", jsonCT, `{"stock":9}`, 400, "unknown_parameter", nil},
		{"unknown query on orders", "GET", "/v1/items/" + sku + "/orders?page=2", "", "", 400, "unknown_parameter", nil},
		{"orders limit 0", "GET", "/v1/items/" + sku + "/orders?limit=0", "", "", 400, "invalid_limit", nil},
		{"orders limit over the maximum", "GET", "/v1/items/" + sku + "/orders?limit=1001", "", "", 400, "invalid_limit", nil},
		{"orders bad cursor", "GET", "/v1/items/" + sku + "/orders?after=xyz", "", "", 400, "invalid_cursor", nil},
		{"PUT without the admin token", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":9}`, 401, "unauthorized", []string{"Authorization", ""}},
		{"PUT with a wrong admin token", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":9}`, 401, "unauthorized", []string{"Authorization", "Bearer " + strings.Repeat("x", 26)}},
		{"PUT with a basic authorization", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":9}`, 401, "unauthorized", []string{"Authorization", "Basic dGVzdDp0ZXN0"}},
		{"unsafe without --demo", "POST", dec, jsonCT, `{"qty":1,"strategy":"unsafe"}`, 403, "strategy_disabled", nil},
		{"local without --demo", "POST", dec, jsonCT, `{"qty":1,"strategy":"local"}`, 403, "strategy_disabled", nil},
		{"duplicate qty", "POST", dec, jsonCT, `{"qty":1,"qty":100}`, 400, "duplicate_field", nil},
		{"duplicate strategy", "POST", dec, jsonCT, `{"strategy":"atomic","qty":1,"strategy":"unsafe"}`, 400, "duplicate_field", nil},
		{"PUT duplicate stock", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":9,"stock":0}`, 400, "duplicate_field", nil},
		{"sku .", "POST", "/v1/items/./decrement", jsonCT, `{"qty":1}`, 400, "invalid_sku", nil},
		{"sku ..", "POST", "/v1/items/../decrement", jsonCT, `{"qty":1}`, 400, "invalid_sku", nil},
		{"sku .. escaped", "POST", "/v1/items/%2E%2E/decrement", jsonCT, `{"qty":1}`, 400, "invalid_sku", nil},
		{"PUT sku ..", "PUT", "/v1/items/..", jsonCT, `{"stock":9}`, 400, "invalid_sku", nil},
		{"empty idempotency key", "POST", dec, jsonCT, `{"qty":1}`, 400, "invalid_idempotency_key", []string{"Idempotency-Key", ""}},
		{"idempotency key too long", "POST", dec, jsonCT, `{"qty":1}`, 400, "invalid_idempotency_key", []string{"Idempotency-Key", strings.Repeat("k", 129)}},
		{"idempotency key not ASCII", "POST", dec, jsonCT, `{"qty":1}`, 400, "invalid_idempotency_key", []string{"Idempotency-Key", "clé"}},
		{"two idempotency keys", "POST", dec, jsonCT, `{"qty":1}`, 400, "invalid_idempotency_key", []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}},
		{"idempotency key with an unterminated quote", "POST", dec, jsonCT, `{"qty":1}`, 400, "invalid_idempotency_key", []string{"Idempotency-Key", `"k`}},
		{"quoted idempotency key with a bad escape", "POST", dec, jsonCT, `{"qty":1}`, 400, "invalid_idempotency_key", []string{"Idempotency-Key", `"a\x"`}},
		{"quoted idempotency key with a dangling escape", "POST", dec, jsonCT, `{"qty":1}`, 400, "invalid_idempotency_key", []string{"Idempotency-Key", `"a\"`}},
		{"quoted idempotency key with parameters", "POST", dec, jsonCT, `{"qty":1}`, 400, "invalid_idempotency_key", []string{"Idempotency-Key", `"k";v=1`}},
		{"empty quoted idempotency key", "POST", dec, jsonCT, `{"qty":1}`, 400, "invalid_idempotency_key", []string{"Idempotency-Key", `""`}},
		{"quoted idempotency key too long", "POST", dec, jsonCT, `{"qty":1}`, 400, "invalid_idempotency_key", []string{"Idempotency-Key", `"` + strings.Repeat("k", 129) + `"`}},
		{"If-Match not a version", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":9}`, 400, "invalid_precondition", []string{"If-Match", "abc"}},
		{"If-Match unquoted", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":9}`, 400, "invalid_precondition", []string{"If-Match", "1"}},
		{"two If-Match", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":9}`, 400, "invalid_precondition", []string{"If-Match", `"1"`, "If-Match", `"1"`}},
		{"If-Match old version", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":9}`, 412, "version_mismatch", []string{"If-Match", `"7"`}},
		{"unknown sku", "POST", "/v1/items/no-such-sku/decrement", jsonCT, `{"qty":1}`, 404, "not_found", nil},
		{"PUT negative stock", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":-1}`, 400, "invalid_stock", nil},
		{"PUT fractional stock", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":2.5}`, 400, "invalid_stock", nil},
		{"PUT stock as string", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":"9"}`, 400, "invalid_type", nil},
		{"PUT missing stock", "PUT", "/v1/items/" + sku, jsonCT, `{}`, 400, "missing_field", nil},
		{"PUT unknown field", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":9,"qty":1}`, 400, "unknown_field", nil},
		{"PUT split as string", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":90,"split":"yes"}`, 400, "invalid_type", nil},
		{"PUT split with If-Match", "PUT", "/v1/items/" + sku, jsonCT, `{"stock":90,"split":true}`, 400, "invalid_precondition", []string{"If-Match", `"1"`}},
		{"PUT wrong Content-Type", "PUT", "/v1/items/" + sku, "text/plain", `{"stock":9}`, 415, "unsupported_media_type", nil},
		{"orders since garbage", "GET", "/v1/items/" + sku + "/orders?since=yesterday", "", "", 400, "invalid_since", nil},
		{"unknown route", "GET", "/v1/nope", "", "", 404, "not_found", nil},
		{"wrong method", "DELETE", "/v1/items/" + sku, "", "", 405, "method_not_allowed", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec, body := call(t, h, tc.method, tc.path, tc.ct, tc.body, tc.header...)
			if rec.Code != tc.status || body["error"] != tc.code {
				t.Fatalf("got %d %v, want %d %q", rec.Code, body, tc.status, tc.code)
			}
			if body["replica"] != "r1" || rec.Header().Get("X-Replica") != "r1" {
				t.Errorf("the answer does not name the replica: header %q, body %v", rec.Header().Get("X-Replica"), body)
			}
			if msg, _ := body["message"].(string); msg == "" {
				t.Errorf("no message in %v", body)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, jsonCT) {
				t.Errorf("Content-Type %q", ct)
			}
			// Nothing changed: same stock, same version, no order.
			rec, item := call(t, h, http.MethodGet, "/v1/items/"+sku, "", "")
			if rec.Code != 200 || item["stock"] != 5.0 || item["version"] != 1.0 {
				t.Errorf("after the bad request the item is %d %v, want stock 5 at version 1", rec.Code, item)
			}
			rec, orders := call(t, h, http.MethodGet, "/v1/items/"+sku+"/orders", "", "")
			if rec.Code != 200 || orders["count"] != 0.0 {
				t.Errorf("after the bad request the ledger is %d %v, want no order", rec.Code, orders)
			}
		})
	}
	if rec, _ := call(t, h, http.MethodGet, "/v1/items/no-such-sku", "", ""); rec.Code != 404 {
		t.Errorf("a decrement of an unknown sku created it: GET answers %d", rec.Code)
	}

	// Unlike every other 503, strategy_unavailable invites no retry: the
	// replica has no etcd until it is restarted with one.
	if rec, _ := call(t, h, http.MethodPost, dec, jsonCT, `{"qty":1,"strategy":"etcd-lock"}`); rec.Header().Get("Retry-After") != "" {
		t.Errorf("strategy_unavailable carries Retry-After %q", rec.Header().Get("Retry-After"))
	}
	// A replica without etcd is ready without it.
	if rec, rz := call(t, h, http.MethodGet, "/readyz", "", ""); rec.Code != 200 || rz["checks"].(map[string]any)["etcd"] != nil {
		t.Errorf("readyz without etcd: %d %v", rec.Code, rz)
	}
}

func TestAPI(t *testing.T) {
	cfg := withNATS(t, testConfig(t, "r1"))
	cfg.EtcdEndpoints = devstoretest.Etcd(t).Endpoints // every strategy, etcd-lock too
	cfg.RedlockAddrs = miniRedlock(t)                  // and redlock
	cfg.Demo = true                                    // unsafe and local too
	s := newServer(t, cfg)
	h := s.Handler()

	initial := len(strategy.Names()) + 4 // one unit per strategy, two by default, and 2 left
	rec, item := call(t, h, http.MethodPut, "/v1/items/api-1", "application/json; charset=utf-8", fmt.Sprintf(`{"stock": %d}`, initial))
	if rec.Code != 200 || item["sku"] != "api-1" || item["stock"] != float64(initial) || item["version"] != 1.0 || item["replica"] != "r1" {
		t.Fatalf("PUT: %d %v", rec.Code, item)
	}
	if _, ok := item["fences"].(map[string]any); !ok {
		t.Errorf("PUT: no fences object in %v", item)
	}

	want := int64(initial)
	for _, name := range strategy.Names() {
		rec, sale := call(t, h, http.MethodPost, "/v1/items/api-1/decrement", jsonCT, `{"qty": 1, "strategy": "`+name+`"}`)
		want--
		if rec.Code != 200 || sale["remaining"] != float64(want) || sale["strategy"] != name || sale["replica"] != "r1" ||
			sale["qty"] != 1.0 || sale["sku"] != "api-1" || sale["recorded"] != true {
			t.Fatalf("decrement with %s: %d %v", name, rec.Code, sale)
		}
		if id, _ := sale["order_id"].(string); len(id) != 32 {
			t.Errorf("order id %q", id)
		}
		fence, _ := sale["fence"].(float64)
		if in, _ := strategy.Lookup(name); in.Fenced != (fence > 0) {
			t.Errorf("%s: fence %v", name, fence)
		}
	}
	// The default strategy.
	if rec, sale := call(t, h, http.MethodPost, "/v1/items/api-1/decrement", jsonCT, `{"qty": 2}`); rec.Code != 200 || sale["strategy"] != cfg.Strategy {
		t.Fatalf("decrement with the default strategy: %d %v", rec.Code, sale)
	}
	rec, e := call(t, h, http.MethodPost, "/v1/items/api-1/decrement", jsonCT, `{"qty": 3, "strategy": "atomic"}`)
	if rec.Code != 409 || e["error"] != "sold_out" || e["stock"] != 2.0 || e["qty"] != 3.0 || e["replica"] != "r1" {
		t.Fatalf("sold out: %d %v", rec.Code, e)
	}

	rec, item = call(t, h, http.MethodGet, "/v1/items/api-1", "", "")
	fences, _ := item["fences"].(map[string]any)
	if rec.Code != 200 || item["stock"] != 2.0 || fences[strategy.MongoLease] == nil || fences[strategy.RedisLock] == nil || fences[strategy.EtcdLock] == nil || fences[strategy.Redlock] == nil {
		t.Fatalf("GET: %d %v", rec.Code, item)
	}
	rec, orders := call(t, h, http.MethodGet, "/v1/items/api-1/orders", "", "")
	if rec.Code != 200 || orders["count"] != float64(len(strategy.Names())+1) {
		t.Fatalf("orders: %d %v", rec.Code, orders)
	}
	list, _ := orders["orders"].([]any)
	last, _ := list[len(list)-1].(map[string]any)
	since := last["at"].(string)
	if rec, later := call(t, h, http.MethodGet, "/v1/items/api-1/orders?since="+since, "", ""); rec.Code != 200 || later["count"].(float64) < 1 {
		t.Fatalf("orders since %s: %d %v", since, rec.Code, later)
	}
	if rec, e := call(t, h, http.MethodGet, "/v1/items/nothing/orders", "", ""); rec.Code != 404 || e["error"] != "not_found" {
		t.Fatalf("orders of an unknown sku: %d %v", rec.Code, e)
	}

	if rec, hz := call(t, h, http.MethodGet, "/healthz", "", ""); rec.Code != 200 || hz["status"] != "ok" || hz["locks_held"] == nil {
		t.Fatalf("healthz: %d %v", rec.Code, hz)
	}
	if rec, rz := call(t, h, http.MethodGet, "/readyz", "", ""); rec.Code != 200 || rz["status"] != "ready" ||
		rz["checks"].(map[string]any)["etcd"] != "ok" {
		t.Fatalf("readyz: %d %v", rec.Code, rz)
	}
	rec, _ = call(t, h, http.MethodGet, "/metrics", "", "")
	for _, m := range []string{
		`stock_http_requests_total{method="POST",route="/v1/items/:sku/decrement",status="200"}`,
		`stock_decrements_total{result="ok",strategy="mongo-lease"}`,
		`stock_decrements_total{result="sold_out",strategy="atomic"}`,
		`stock_lock_wait_seconds_bucket{acquired="true",strategy="redis-lock"`,
		`stock_lock_held{strategy="mongo-lease"} 0`,
		`stock_leases_lost_total{strategy="redis-lock"} 0`,
		`stock_fenced_rejections_total{strategy="mongo-lease"} 0`,
		`stock_ledger_insert_failures_total{strategy="atomic"} 0`,
		`stock_http_requests_total{method="GET",route="unmatched",status="404"}`,
	} {
		if m == `stock_http_requests_total{method="GET",route="unmatched",status="404"}` {
			call(t, h, http.MethodGet, "/nowhere", "", "")
			rec, _ = call(t, h, http.MethodGet, "/metrics", "", "")
		}
		if !strings.Contains(rec.Body.String(), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// An etcd that stops answering makes the replica not ready, as MongoDB and
// Redis do: the etcd-lock strategy could grant nothing.
func TestReadyzEtcdDown(t *testing.T) {
	t.Parallel() // its own database and skus; it mostly waits
	etcd := devstoretest.Etcd(t)
	if etcd.Kind != devstore.KindEmbeddedEtcd {
		t.Skip("ETCD_ENDPOINTS is a shared etcd: not stopping it")
	}
	cfg := testConfig(t, "r1")
	cfg.EtcdEndpoints = etcd.Endpoints
	h := newServer(t, cfg).Handler()
	if rec, rz := call(t, h, http.MethodGet, "/readyz", "", ""); rec.Code != 200 {
		t.Fatalf("readyz before: %d %v", rec.Code, rz)
	}
	if err := etcd.Kill(0); err != nil {
		t.Fatal(err)
	}
	// The result is reused for a second; the next probe after that sees it.
	var rec *httptest.ResponseRecorder
	var rz map[string]any
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if rec, rz = call(t, h, http.MethodGet, "/readyz", "", ""); rec.Code != 200 {
			break
		}
	}
	checks, _ := rz["checks"].(map[string]any)
	if rec.Code != http.StatusServiceUnavailable || rz["error"] != "not_ready" || checks["etcd"] != "failing" || checks["mongodb"] != "ok" {
		t.Fatalf("readyz with etcd down: %d %v", rec.Code, rz)
	}
	// Only ok or failing: no error text naming hosts and ports.
	if body := rec.Body.String(); strings.Contains(body, "127.0.0.1") || strings.Contains(body, "context deadline") {
		t.Fatalf("readyz leaks the error: %s", body)
	}
}
