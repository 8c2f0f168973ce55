package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"

	"github.com/alicebob/miniredis/v2"

	"github.com/stocklock/stocklock/internal/devstore/devstoretest"
	"github.com/stocklock/stocklock/services/stock/server"
)

// miniRedlock returns the addresses of five in-process stand-ins for
// independent redis-servers, closed when the test ends: enough for the
// tests that only need the redlock strategy served. TestRedlockReplicas
// runs it on real redis-servers.
func miniRedlock(t *testing.T) []string {
	t.Helper()
	var addrs []string
	for range 5 {
		srv := miniredis.NewMiniRedis()
		srv.ClockTTL(true) // expire keys in real time
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		addrs = append(addrs, srv.Addr())
	}
	return addrs
}

// TestRedlockReplicas: two replicas that lock on five real redis-servers
// sell with the redlock strategy and keep the books straight, and sell on
// with two of the five stopped (a majority is left).
func TestRedlockReplicas(t *testing.T) {
	servers := devstoretest.RedisServers(t, 5)
	reps := startReplicas(t, 2, func(c *server.Config) { c.RedlockAddrs = servers.Addrs() })
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4 * concurrency}}
	t.Cleanup(client.CloseIdleConnections)

	requests, _ := load()
	out, stock, orders := race(t, client, reps, strategy.Redlock, requests)
	checkBooks(t, out, initialStock, stock, orders)
	if out.sold == 0 {
		t.Fatalf("nothing sold with redlock: %v", out.statuses)
	}

	for _, r := range servers.Servers[:2] {
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	sku := "redlock-minority-down"
	put(t, client, reps[0], sku, 10)
	out = hammer(t, client, reps, sku, []string{strategy.Redlock}, 20, 4)
	stock, orders = ledger(t, client, reps[1], sku)
	t.Logf("two of five servers stopped: sold %d, answers %v, stock left %d", out.sold, out.statuses, stock)
	checkBooks(t, out, 10, stock, orders)
	if out.sold != 10 {
		t.Errorf("sold %d of 10 with a majority of the servers up: %v", out.sold, out.statuses)
	}
}

// A replica without --redlock-addrs answers 503 strategy_unavailable for
// redlock, naming the setting it lacks; a replica whose servers are not a
// majority up does not start.
func TestRedlockUnavailable(t *testing.T) {
	h := newServer(t, testConfig(t, "r1")).Handler()
	if rec, _ := call(t, h, http.MethodPut, "/v1/items/rl", jsonCT, `{"stock":1}`); rec.Code != 200 {
		t.Fatalf("PUT: %d", rec.Code)
	}
	rec, body := call(t, h, http.MethodPost, "/v1/items/rl/decrement", jsonCT, `{"qty":1,"strategy":"redlock"}`)
	if msg, _ := body["message"].(string); rec.Code != http.StatusServiceUnavailable || body["error"] != "strategy_unavailable" || !strings.Contains(msg, "--redlock-addrs / REDLOCK_ADDRS") {
		t.Errorf("redlock without servers: %d %v", rec.Code, body)
	}

	cfg := testConfig(t, "r2")
	addrs := miniRedlock(t)
	cfg.RedlockAddrs = append(addrs[:2], "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3")
	if _, err := server.New(t.Context(), cfg, nil); err == nil || !strings.Contains(err.Error(), "only 2 of 5 redlock servers answer") {
		t.Errorf("New with 2 of 5 redlock servers up: %v", err)
	}
}
