package server_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stocklock/stocklock/internal/devstore"
	"github.com/stocklock/stocklock/internal/testskip"
)

// scrape reads h's /metrics and returns every sample by family name and
// label set (`{k="v",...}` in the labels' order, "" without labels).
func scrape(t *testing.T, h http.Handler) map[string]map[string]float64 {
	t.Helper()
	rec, _ := call(t, h, http.MethodGet, "/metrics", "", "")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	out := map[string]map[string]float64{}
	for name, f := range fams {
		out[name] = map[string]float64{}
		for _, m := range f.GetMetric() {
			labels := ""
			for i, lp := range m.GetLabel() {
				if i > 0 {
					labels += ","
				}
				labels += fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue())
			}
			if labels != "" {
				labels = "{" + labels + "}"
			}
			var v float64
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM: // its count, under name_count
				if out[name+"_count"] == nil {
					out[name+"_count"] = map[string]float64{}
				}
				out[name+"_count"][labels] = float64(m.GetHistogram().GetSampleCount())
				continue
			default:
				continue
			}
			out[name][labels] = v
		}
	}
	return out
}

// redisStockReplica starts a replica on the Redis at addr and returns its
// handler and helpers that PUT a sku's stock and sell it with redis-stock.
func redisStockReplica(t *testing.T, addr string) (h http.Handler, put func(string, int), sell func(string, int)) {
	t.Helper()
	cfg := testConfig(t, "r1")
	cfg.RedisAddr = addr
	h = newServer(t, cfg).Handler()
	sell = func(sku string, n int) {
		t.Helper()
		for range n {
			if rec, sale := call(t, h, http.MethodPost, "/v1/items/"+sku+"/decrement", jsonCT, `{"qty": 1, "strategy": "redis-stock"}`); rec.Code != http.StatusOK {
				t.Fatalf("decrement %s: %d %v", sku, rec.Code, sale)
			}
		}
	}
	put = func(sku string, stock int) {
		t.Helper()
		if rec, _ := call(t, h, http.MethodPut, "/v1/items/"+sku, jsonCT, fmt.Sprintf(`{"stock": %d}`, stock)); rec.Code != http.StatusOK {
			t.Fatalf("PUT %s: %d", sku, rec.Code)
		}
	}
	return h, put, sell
}

// expectMetrics checks the samples of m named by want's keys
// (`name{label="value"}`, or a bare name).
func expectMetrics(t *testing.T, when string, m map[string]map[string]float64, want map[string]float64) {
	t.Helper()
	for key, v := range want {
		name, labels, _ := strings.Cut(key, "{")
		if labels != "" {
			labels = "{" + labels
		}
		got, ok := m[name][labels]
		if !ok || got != v {
			t.Errorf("%s: %s = %v (exported: %v), want %v", when, key, got, ok, v)
		}
	}
}

// TestRedisStockMetrics sells with redis-stock and reads /metrics: the copy
// in Redis and the item agree with the sales, nothing is left unwritten,
// the first sale's load is counted, every other reason shows at 0. Sold on
// more skus than the per-sku gauges cover, they cover the most recent
// only.
func TestRedisStockMetrics(t *testing.T) {
	h, put, sell := redisStockReplica(t, redisAddr)
	put("rsm", 10)
	sell("rsm", 3)
	expectMetrics(t, "after 3 sales of 10", scrape(t, h), map[string]float64{
		`stock_redis_stock_watched_skus`:                       1,
		`stock_redis_stock_units{sku="rsm"}`:                   7,
		`stock_redis_stock_item_units{sku="rsm"}`:              7,
		`stock_redis_stock_unwritten_units{sku="rsm"}`:         0,
		`stock_redis_stock_unwritten_age_seconds{sku="rsm"}`:   0,
		`stock_redis_stock_epoch{sku="rsm"}`:                   1,
		`stock_redis_stock_reloads_total{reason="first_load"}`: 1,
		`stock_redis_stock_reloads_total{reason="redis_lost"}`: 0,
		`stock_redis_stock_reloads_total{reason="dead_take"}`:  0,
		`stock_redis_stock_reloads_total{reason="refused"}`:    0,
		`stock_redis_stock_reloads_total{reason="item_ahead"}`: 0,
	})

	// More skus than the gauges cover: the 10 sold most recently.
	for i := range 10 {
		sku := fmt.Sprintf("rsm-%02d", i)
		put(sku, 5)
		sell(sku, 1)
	}
	m := scrape(t, h)
	expectMetrics(t, "after sales of 11 skus", m, map[string]float64{
		`stock_redis_stock_watched_skus`:                       10,
		`stock_redis_stock_units{sku="rsm-09"}`:                4,
		`stock_redis_stock_reloads_total{reason="first_load"}`: 11,
	})
	if n := len(m["stock_redis_stock_units"]); n != 10 {
		t.Errorf("stock_redis_stock_units has %d series, want 10: %v", n, m["stock_redis_stock_units"])
	}
	if _, ok := m["stock_redis_stock_units"][`{sku="rsm"}`]; ok {
		t.Errorf(`stock_redis_stock_units{sku="rsm"} is still exported: it was sold least recently`)
	}
}

// TestRedisStockMetricsRedisRestart: a replica's Redis is a private
// redis-server, restarted without persistence after 3 sales of 10; the
// gauges show Redis holding nothing and the item 7; the next sale's reload
// is counted as redis_lost, and the copy starts again from the item.
func TestRedisStockMetricsRedisRestart(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	srv, err := devstore.StartRedis(t.Context(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if srv.Kind != devstore.KindRedisServer {
		testskip.Missing(t, testskip.RedisServer, "a restart without persistence needs redis-server, have "+string(srv.Kind))
	}
	h, put, sell := redisStockReplica(t, srv.Addr)
	put("rsr", 10)
	sell("rsr", 3)
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectMetrics(t, "after Redis restarted", scrape(t, h), map[string]float64{
		`stock_redis_stock_units{sku="rsr"}`:      0, // Redis holds nothing
		`stock_redis_stock_epoch{sku="rsr"}`:      0,
		`stock_redis_stock_item_units{sku="rsr"}`: 7,
	})
	sell("rsr", 2)
	expectMetrics(t, "after 2 more sales", scrape(t, h), map[string]float64{
		`stock_redis_stock_units{sku="rsr"}`:                   5,
		`stock_redis_stock_item_units{sku="rsr"}`:              5,
		`stock_redis_stock_epoch{sku="rsr"}`:                   2,
		`stock_redis_stock_reloads_total{reason="first_load"}`: 1,
		`stock_redis_stock_reloads_total{reason="redis_lost"}`: 1,
	})
}
