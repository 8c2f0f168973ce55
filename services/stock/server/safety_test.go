package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/pkg/inventory"
	"github.com/stocklock/stocklock/services/stock/server"
)

// sale is a decrement's answer, success or error.
type sale struct {
	status    int
	replayed  bool
	OrderID   string `json:"order_id"`
	Remaining *int64 `json:"remaining"`
	Replica   string `json:"replica"`
	Error     string `json:"error"`
}

// decrementWithKey sends one decrement of qty with an Idempotency-Key.
func decrementWithKey(t *testing.T, client *http.Client, rep replica, sku, key, body string) sale {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, rep.url+"/v1/items/"+sku+"/decrement", bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s sale
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	s.status, s.replayed = resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true"
	return s
}

// TestIdempotencyKey: a retried request with one key sells once, on either
// replica and after a restart; the same key with another body is a 422;
// eight at once sell once.
func TestIdempotencyKey(t *testing.T) {
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	var cfgs []server.Config
	reps := startReplicas(t, 2, func(c *server.Config) { cfgs = append(cfgs, *c) })
	put(t, client, reps[0], "idem", 10)

	first := decrementWithKey(t, client, reps[0], "idem", "order-42", `{"qty":2,"strategy":"atomic"}`)
	if first.status != 200 || first.replayed || first.Remaining == nil || *first.Remaining != 8 {
		t.Fatalf("first request: %+v", first)
	}
	again := decrementWithKey(t, client, reps[1], "idem", "order-42", `{"qty":2,"strategy":"atomic"}`)
	if again.status != 200 || !again.replayed || again.OrderID != first.OrderID || *again.Remaining != 8 || again.Replica != reps[0].name {
		t.Fatalf("retry on the other replica: %+v, want the first sale %+v replayed", again, first)
	}
	if other := decrementWithKey(t, client, reps[1], "idem", "order-42", `{"qty":3,"strategy":"atomic"}`); other.status != 422 || other.Error != "idempotency_key_reused" {
		t.Fatalf("same key, other body: %+v, want 422 idempotency_key_reused", other)
	}
	// A replica started later, on the same database, still knows the key.
	// (Under a name of its own: replica-a still beats, and a second
	// process with its name would be refused.)
	late := cfgs[0]
	late.Replica = "replica-late"
	restarted := newServer(t, late)
	rec, body := call(t, restarted.Handler(), http.MethodPost, "/v1/items/idem/decrement", jsonCT, `{"qty":2,"strategy":"atomic"}`, "Idempotency-Key", "order-42")
	if rec.Code != 200 || body["order_id"] != first.OrderID || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after a restart: %d %v", rec.Code, body)
	}

	// Eight at once, both replicas, a lock strategy.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		got   []sale
		fresh atomic.Int32
	)
	for i := range 8 {
		wg.Go(func() {
			s := decrementWithKey(t, client, reps[i%2], "idem", "burst", `{"qty":1,"strategy":"redis-lock"}`)
			if s.status == 200 && !s.replayed {
				fresh.Add(1)
			}
			mu.Lock()
			got = append(got, s)
			mu.Unlock()
		})
	}
	wg.Wait()
	ids := map[string]bool{}
	for _, s := range got {
		switch {
		case s.status == 200:
			ids[s.OrderID] = true
		case s.status == 409 && s.Error == "idempotency_in_progress":
		default:
			t.Errorf("concurrent duplicate: %+v", s)
		}
	}
	if len(ids) != 1 || fresh.Load() != 1 {
		t.Errorf("eight requests with one key: orders %v, %d fresh sales; want one", ids, fresh.Load())
	}
	stock, orders := ledger(t, client, reps[0], "idem")
	if stock != 7 || len(orders) != 2 {
		t.Fatalf("stock %d with %d orders, want 7 and 2: two keys, two sales", stock, len(orders))
	}
}

// TestPutIfMatch: PUT with the ETag of what was read refuses to overwrite
// a sale made since.
func TestPutIfMatch(t *testing.T) {
	h := newServer(t, testConfig(t, "r1")).Handler()
	rec, _ := call(t, h, http.MethodPut, "/v1/items/etag", jsonCT, `{"stock":5}`)
	tag := rec.Header().Get("ETag")
	if rec.Code != 200 || tag != `"1"` {
		t.Fatalf("PUT: %d, ETag %q", rec.Code, tag)
	}
	if rec, _ := call(t, h, http.MethodPost, "/v1/items/etag/decrement", jsonCT, `{"qty":1,"strategy":"atomic"}`); rec.Code != 200 {
		t.Fatalf("decrement: %d", rec.Code)
	}
	if rec, body := call(t, h, http.MethodPut, "/v1/items/etag", jsonCT, `{"stock":10}`, "If-Match", tag); rec.Code != 412 || body["error"] != "version_mismatch" {
		t.Fatalf("PUT at the old version: %d %v", rec.Code, body)
	}
	rec, item := call(t, h, http.MethodGet, "/v1/items/etag", "", "")
	if item["stock"] != 4.0 || rec.Header().Get("ETag") != `"2"` {
		t.Fatalf("after the refused PUT: %v, ETag %q", item, rec.Header().Get("ETag"))
	}
	if rec, item := call(t, h, http.MethodPut, "/v1/items/etag", jsonCT, `{"stock":10}`, "If-Match", `"2"`); rec.Code != 200 || item["stock"] != 10.0 {
		t.Fatalf("PUT at the current version: %d %v", rec.Code, item)
	}
}

// TestReplicaDiesBetweenStockAndLedger stops replica a's requests between
// their stock write and their ledger write (every third sale), under load
// on both replicas, for a lock strategy and the atomic update. Replica b's
// periodic recovery must make units taken equal orders in the ledger, with
// every acknowledged sale among them.
func TestReplicaDiesBetweenStockAndLedger(t *testing.T) {
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	var writes, deaths atomic.Int64
	reps := startReplicas(t, 2, func(c *server.Config) {
		c.RecoveryEvery, c.RecoveryGrace = 200*time.Millisecond, 0
		if c.Replica == "replica-a" {
			c.RecoveryEvery = time.Hour // a is "dead": only b recovers
			server.SetAfterTake(c, func(inventory.Order) {
				if writes.Add(1)%3 == 0 {
					deaths.Add(1)
					runtime.Goexit() // the request's goroutine ends: no order, no answer
				}
			})
		}
	})
	for _, strategy := range []string{strategy.RedisLock, strategy.Atomic} {
		t.Run(strategy, func(t *testing.T) {
			sku := "die-" + strategy
			const stock = 30
			put(t, client, reps[0], sku, stock)
			out := hammer(t, client, reps, sku, []string{strategy}, 60, 8)
			if deaths.Load() == 0 || len(out.errors) == 0 {
				t.Fatalf("no request died (%d deaths, errors %q): the hook did not fire", deaths.Load(), out.errors)
			}
			var left int64
			var orders []inventory.Order
			for deadline := time.Now().Add(30 * time.Second); ; {
				left, orders = ledger(t, client, reps[1], sku)
				if int64(len(orders)) == stock-left || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if taken := stock - left; int64(len(orders)) != taken {
				t.Errorf("units taken %d, orders in the ledger %d", taken, len(orders))
			}
			inLedger := map[string]bool{}
			for _, o := range orders {
				inLedger[o.ID] = true
			}
			for id := range out.orderIDs {
				if !inLedger[id] {
					t.Errorf("acknowledged order %s is not in the ledger", id)
				}
			}
			t.Logf("%s: %d acknowledged, %d died after the stock write, %d orders, stock %d", strategy, out.sold, len(out.errors), len(orders), left)
		})
	}
}

// TestShutdownUnderLoad shuts a replica down, with an already expired
// deadline, while decrements are inside their critical sections: every
// acknowledged sale must be in the ledger, and units taken must equal
// orders, without any recovery.
func TestShutdownUnderLoad(t *testing.T) {
	client := &http.Client{Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	base := testConfig(t, "")
	base.Demo, base.RMWDelay = true, 300*time.Millisecond
	base.RecoveryEvery = time.Hour
	base.Replica = "stopping"
	s, err := server.New(t.Context(), base, server.NewLogger(t.Output(), base))
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	go func() { _ = s.Serve(ln) }()
	rep := replica{name: "stopping", url: "http://" + ln.Addr().String()}
	readerCfg := base
	readerCfg.Replica = "reader"
	reader := newServer(t, readerCfg).Handler()

	for _, strategy := range []string{strategy.RedisLock, strategy.Atomic, strategy.Optimistic} {
		put(t, client, rep, "stop-"+strategy, 50)
	}
	type answer struct {
		status  int
		orderID string
		sku     string
	}
	answers := make(chan answer, 64)
	var wg sync.WaitGroup
	for i := range 24 {
		strategy := []string{strategy.RedisLock, strategy.Atomic, strategy.Optimistic}[i%3]
		wg.Go(func() {
			sku := "stop-" + strategy
			resp, err := client.Post(rep.url+"/v1/items/"+sku+"/decrement", "application/json",
				bytes.NewBufferString(`{"qty":1,"strategy":"`+strategy+`"}`))
			if err != nil {
				answers <- answer{sku: sku}
				return
			}
			defer resp.Body.Close()
			var body struct {
				OrderID string `json:"order_id"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			answers <- answer{status: resp.StatusCode, orderID: body.OrderID, sku: sku}
		})
	}
	time.Sleep(150 * time.Millisecond) // the decrements are between their reads and writes
	expired, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_ = s.Shutdown(expired)
	wg.Wait()
	close(answers)

	acked := map[string]map[string]bool{}
	statuses := map[int]int{}
	for a := range answers {
		statuses[a.status]++
		if a.status == 200 {
			if acked[a.sku] == nil {
				acked[a.sku] = map[string]bool{}
			}
			acked[a.sku][a.orderID] = true
		}
	}
	t.Logf("answers by status: %v", statuses)
	if statuses[200] == 0 {
		t.Fatal("no sale completed: the shutdown came before any decrement was admitted")
	}
	for _, strategy := range []string{strategy.RedisLock, strategy.Atomic, strategy.Optimistic} {
		sku := "stop-" + strategy
		_, item := call(t, reader, http.MethodGet, "/v1/items/"+sku, "", "")
		_, list := call(t, reader, http.MethodGet, "/v1/items/"+sku+"/orders?limit=1000", "", "")
		orders, _ := list["orders"].([]any)
		taken := 50 - int(item["stock"].(float64))
		if len(orders) != taken {
			t.Errorf("%s: %d units taken, %d orders in the ledger", sku, taken, len(orders))
		}
		inLedger := map[string]bool{}
		for _, o := range orders {
			inLedger[o.(map[string]any)["order_id"].(string)] = true
		}
		for id := range acked[sku] {
			if !inLedger[id] {
				t.Errorf("%s: acknowledged order %s is not in the ledger", sku, id)
			}
		}
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestInternalListener: with --internal-addr, health and metrics leave the
// API listener for the internal one, and the API stays off the internal one.
func TestInternalListener(t *testing.T) {
	cfg := testConfig(t, "r1")
	cfg.InternalAddr = "127.0.0.1:0"
	s := newServer(t, cfg)
	api, internal := s.Handler(), s.InternalHandler()
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if rec, _ := call(t, api, http.MethodGet, path, "", ""); rec.Code != http.StatusNotFound {
			t.Errorf("API listener %s: %d, want 404", path, rec.Code)
		}
		req := httptest.NewRequest(http.MethodGet, path, nil)
		rec := httptest.NewRecorder()
		internal.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("internal listener %s: %d, want 200", path, rec.Code)
		}
	}
	if rec, _ := call(t, internal, http.MethodPut, "/v1/items/x", jsonCT, `{"stock":1}`); rec.Code != http.StatusNotFound {
		t.Errorf("internal listener PUT: %d, want 404", rec.Code)
	}
	if rec, _ := call(t, api, http.MethodPut, "/v1/items/x", jsonCT, `{"stock":1}`); rec.Code != http.StatusOK {
		t.Errorf("API listener PUT: %d, want 200", rec.Code)
	}
}

// TestNoAdminToken: a replica without an admin token serves no stock
// changes.
func TestNoAdminToken(t *testing.T) {
	cfg := testConfig(t, "r1")
	cfg.AdminToken = ""
	h := newServer(t, cfg).Handler()
	if rec, body := call(t, h, http.MethodPut, "/v1/items/x", jsonCT, `{"stock":1}`); rec.Code != http.StatusNotFound || body["error"] != "not_found" {
		t.Fatalf("PUT without a configured token: %d %v, want 404", rec.Code, body)
	}
	if rec, _ := call(t, h, http.MethodGet, "/v1/items/x", "", ""); rec.Code != http.StatusNotFound {
		t.Fatalf("the refused PUT created the item: %d", rec.Code)
	}
}

// TestRegistryServed: a replica without --demo serves every safe strategy
// of the registry and refuses every unsafe one (403); with --demo, etcd
// and the redlock servers it serves them all (TestAPI).
func TestRegistryServed(t *testing.T) {
	cfg := withNATS(t, testConfig(t, "r1"))
	cfg.EtcdEndpoints = devstoretest.Etcd(t).Endpoints
	cfg.RedlockAddrs = miniRedlock(t)
	h := newServer(t, cfg).Handler()
	if rec, _ := call(t, h, http.MethodPut, "/v1/items/reg", jsonCT, `{"stock":100}`); rec.Code != 200 {
		t.Fatalf("PUT: %d", rec.Code)
	}
	for _, in := range strategy.All() {
		rec, body := call(t, h, http.MethodPost, "/v1/items/reg/decrement", jsonCT, `{"qty":1,"strategy":"`+in.Name+`"}`)
		want := http.StatusOK
		if !in.Safe {
			want = http.StatusForbidden
		}
		if rec.Code != want {
			t.Errorf("%s (safe %v): %d %v, want %d", in.Name, in.Safe, rec.Code, body, want)
		}
	}
}
