package server

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocklock/stocklock/pkg/inventory/mongostore"
)

// Bounds of redis-stock's per-sku gauges: a label per sku is a series per
// sku, so they cover only the skus this replica sold with redis-stock most
// recently, hotSKUMax of them at most, each for hotSKUWindow after its last
// sale. A flash sale's hot skus are few; the rest of the catalogue never
// becomes a series.
const (
	hotSKUMax    = 10
	hotSKUWindow = 2 * time.Minute
	// hotSKURead bounds the reads of one scrape (Redis, then MongoDB, per
	// sku): a store that does not answer costs the scrape its redis-stock
	// gauges, not the scrape.
	hotSKURead = time.Second
)

// hotSKUs are the skus this replica sold with redis-stock most recently,
// with when: at most hotSKUMax, the least recent evicted first.
type hotSKUs struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (h *hotSKUs) touch(sku string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.last[sku]; !ok && len(h.last) >= hotSKUMax {
		oldest := ""
		for s, at := range h.last {
			if oldest == "" || at.Before(h.last[oldest]) {
				oldest = s
			}
		}
		delete(h.last, oldest)
	}
	h.last[sku] = now
}

// list returns the skus sold within hotSKUWindow before now, by name, and
// forgets the others.
func (h *hotSKUs) list(now time.Time) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.last))
	for s, at := range h.last {
		if now.Sub(at) > hotSKUWindow {
			delete(h.last, s)
			continue
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// redisStockCollector exports, at every scrape, what Redis and MongoDB hold
// for the hot skus: read then, so that every replica reports the same
// Redis, and nothing is read between scrapes.
type redisStockCollector struct {
	rs     *mongostore.RedisStock
	store  *mongostore.Store
	hot    *hotSKUs
	logger *slog.Logger

	watched, units, unwritten, age, item, epoch *prometheus.Desc
}

func newRedisStockCollector(rs *mongostore.RedisStock, store *mongostore.Store, hot *hotSKUs, logger *slog.Logger) *redisStockCollector {
	sku := []string{"sku"}
	return &redisStockCollector{
		rs: rs, store: store, hot: hot, logger: logger,
		watched: prometheus.NewDesc("stock_redis_stock_watched_skus",
			"Skus this replica sold with redis-stock in the last 2 minutes (at most 10, the most recent): those the stock_redis_stock_* gauges with a sku label cover.", nil, nil),
		units: prometheus.NewDesc("stock_redis_stock_units",
			"Units redis-stock's copy in Redis can still sell, by sku (the watched skus only), read at scrape time.", sku, nil),
		unwritten: prometheus.NewDesc("stock_redis_stock_unwritten_units",
			"Units taken in Redis and not yet written to MongoDB's item and ledger (the ledger's lag), by sku (the watched skus only).", sku, nil),
		age: prometheus.NewDesc("stock_redis_stock_unwritten_age_seconds",
			"Age of the oldest sale taken in Redis and not yet written to MongoDB, by the Redis server's clock, by sku (the watched skus only); 0 when none. Past the recovery grace, recovery reloads the sku.", sku, nil),
		item: prometheus.NewDesc("stock_redis_stock_item_units",
			"The MongoDB item's stock, the truth, read right after Redis's copy, by sku (the watched skus only).", sku, nil),
		epoch: prometheus.NewDesc("stock_redis_stock_epoch",
			"The epoch of the copy Redis holds, by sku (the watched skus only); 0 when Redis holds none. Every reload moves it.", sku, nil),
	}
}

func (c *redisStockCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.watched, c.units, c.unwritten, c.age, c.item, c.epoch} {
		ch <- d
	}
}

func (c *redisStockCollector) Collect(ch chan<- prometheus.Metric) {
	skus := c.hot.list(time.Now())
	ch <- prometheus.MustNewConstMetric(c.watched, prometheus.GaugeValue, float64(len(skus)))
	if len(skus) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), hotSKURead)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, sku string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, sku)
	}
	for _, sku := range skus {
		// Redis first, then the item: read in that order, the item holds
		// at most Redis's units plus those in flight.
		st, err := c.rs.State(ctx, sku)
		if err != nil {
			c.logger.Debug("metrics: redis-stock's copy not read", slog.String("sku", sku), slog.Any("error", err))
			continue
		}
		if st.Epoch < 0 { // not loaded: Redis holds nothing
			st = mongostore.RedisState{}
		}
		gauge(c.units, float64(st.Stock), sku)
		gauge(c.unwritten, float64(st.Inflight), sku)
		gauge(c.age, max(st.OldestSale, 0).Seconds(), sku)
		gauge(c.epoch, float64(st.Epoch), sku)
		it, err := c.store.Get(ctx, sku)
		if err != nil {
			c.logger.Debug("metrics: redis-stock's item not read", slog.String("sku", sku), slog.Any("error", err))
			continue
		}
		gauge(c.item, float64(it.Stock), sku)
	}
}

// watchRedisStock exports rs's per-sku gauges for the skus sold with it.
func (m *metrics) watchRedisStock(rs *mongostore.RedisStock, store *mongostore.Store, logger *slog.Logger) {
	m.redisStockHot = &hotSKUs{last: map[string]time.Time{}}
	m.registry.MustRegister(newRedisStockCollector(rs, store, m.redisStockHot, logger))
}

// redisStockSold notes a decrement of sku by redis-stock, for its gauges.
func (m *metrics) redisStockSold(sku string) {
	if m.redisStockHot != nil {
		m.redisStockHot.touch(sku, time.Now())
	}
}

// RedisStockReloaded implements mongostore.RedisStockObserver.
func (m *metrics) RedisStockReloaded(_, reason string) {
	m.redisStockReloads.WithLabelValues(reason).Inc()
}
