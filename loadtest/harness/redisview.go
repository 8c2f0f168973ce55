package harness

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/stocklock/stocklock/pkg/strategy"
)

// WithViews makes the harness sample, from the replicas' metrics (about
// four times a second), what the strategies that keep a sale's truth in
// two places hold while they sell: for redis-stock, what Redis and the
// MongoDB item hold for each sku and the replicas' reloads of Redis
// (EventRedisStock, EventReload); for queued, its log's depth and the
// buyers waiting for answers (EventQueue). They are the live page's views
// of those strategies. The command line does without: the scrapes cost
// the replicas a Redis and a MongoDB read per sku each, or a NATS request.
func WithViews() Option { return func(h *Harness) { h.views = true } }

// parseRedisStock reads the redis-stock metrics (services/stock/server) of
// skus from a Prometheus text exposition: the samples by sku (of skus) and
// the reload counters by reason; nil when it cannot be parsed.
func parseRedisStock(text []byte, skus []string) (samples map[string]RedisStockSample, reloads map[string]float64) {
	fams := families(text)
	if len(fams) == 0 {
		return nil, nil
	}
	samples, reloads = map[string]RedisStockSample{}, map[string]float64{}
	for _, m := range fams["stock_redis_stock_reloads_total"].GetMetric() {
		reloads[label(m, "reason")] = m.GetCounter().GetValue()
	}
	// A sku is sampled only with its copy's gauges; the item's is added
	// when the replica could read it.
	for _, m := range fams["stock_redis_stock_units"].GetMetric() {
		if sku := label(m, "sku"); slices.Contains(skus, sku) {
			samples[sku] = RedisStockSample{Stock: int64(m.GetGauge().GetValue())}
		}
	}
	set := func(name string, f func(*RedisStockSample, float64)) {
		for _, m := range fams[name].GetMetric() {
			sku := label(m, "sku")
			if s, ok := samples[sku]; ok {
				f(&s, m.GetGauge().GetValue())
				samples[sku] = s
			}
		}
	}
	set("stock_redis_stock_unwritten_units", func(s *RedisStockSample, v float64) { s.Unwritten = int64(v) })
	set("stock_redis_stock_unwritten_age_seconds", func(s *RedisStockSample, v float64) { s.AgeMs = v * 1000 })
	set("stock_redis_stock_epoch", func(s *RedisStockSample, v float64) { s.Epoch = int64(v) })
	set("stock_redis_stock_item_units", func(s *RedisStockSample, v float64) { n := int64(v); s.Item = &n })
	return samples, reloads
}

// watchRedisStock samples redis-stock's copies of skus and the replicas'
// reloads for the run of name (writers are the strategies that sell in it)
// until the returned function is called, which takes a last sample; it
// does nothing without WithViews or when redis-stock does not
// sell in the run. Call it before the attack starts: its first scrape is
// the baseline of the reload counters.
func (h *Harness) watchRedisStock(ctx context.Context, name string, writers, skus []string) func() {
	if !h.views || !slices.Contains(writers, strategy.RedisStock) {
		return func() {}
	}
	run := h.runNo
	prev := map[string]map[string]float64{} // reload counters by replica id, then reason
	prevAt := map[string]time.Time{}        // when they were read
	sample := func(bool) {
		seen := map[string]bool{} // the skus sampled from an earlier replica: they all read the same Redis
		for _, base := range h.replicas {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			asked := time.Now()
			text, err := h.api.At(base).Metrics(cctx)
			cancel()
			if err != nil {
				continue // a replica killed or cut off: the others tell
			}
			samples, reloads := parseRedisStock(text, skus)
			if samples == nil {
				continue
			}
			id := h.ids[base]
			if p, ok := prev[id]; ok {
				for _, reason := range slices.Sorted(maps.Keys(reloads)) {
					n := reloads[reason] - p[reason]
					if n < 0 { // the replica restarted: its counters too
						n = reloads[reason]
					}
					if n > 0 {
						ev := Event{Type: EventReload, Run: run, Strategy: name, Replica: id, Reason: reason, Count: int(n), Since: prevAt[id]}
						if len(skus) == 1 {
							ev.SKU = skus[0]
						}
						h.emit(ev)
					}
				}
			}
			prev[id], prevAt[id] = reloads, asked
			for _, sku := range slices.Sorted(maps.Keys(samples)) {
				if seen[sku] {
					continue
				}
				seen[sku] = true
				s := samples[sku]
				h.emit(Event{Type: EventRedisStock, Run: run, Strategy: name, SKU: sku, Redis: &s})
			}
		}
	}
	sample(false) // the baseline
	return ticking(progressGap, sample)
}
